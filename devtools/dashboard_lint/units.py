"""The unit ids the panel-units rule accepts: upstream's list, taken from Grafana's value
formats (packages/grafana-data/src/valueFormats/categories.ts), by category."""

from __future__ import annotations

VALID_UNITS: frozenset[str] = frozenset((
    # scalar, misc, short
    "none", "string",
    "short", "percent", "percentunit", "humidity", "dB", "hex0x", "hex", "sci", "locale", "pixel",
    # acceleration, angle, area
    "accMS2", "accFS2", "accG",
    "degree", "radian", "grad", "arcmin", "arcsec",
    "areaM2", "areaF2", "areaMI2",
    # computation
    "flops", "mflops", "gflops", "tflops", "pflops", "eflops", "zflops", "yflops",
    # concentration
    "ppm", "conppb", "conngm3", "conngNm3", "conμgm3", "conμgNm3", "conmgm3", "conmgNm3",
    "congm3", "congNm3", "conmgdL", "conmmolL",
    # currency
    "currencyUSD", "currencyGBP", "currencyEUR", "currencyJPY", "currencyRUB", "currencyUAH",
    "currencyBRL", "currencyDKK", "currencyISK", "currencyNOK", "currencySEK", "currencyCZK",
    "currencyCHF", "currencyPLN", "currencyBTC", "currencymBTC", "currencyμBTC", "currencyZAR",
    "currencyINR", "currencyKRW", "currencyIDR", "currencyPHP", "currencyVND",
    # data
    "bytes", "decbytes", "bits", "decbits", "kbytes", "deckbytes", "mbytes", "decmbytes",
    "gbytes", "decgbytes", "tbytes", "dectbytes", "pbytes", "decpbytes",
    # data rate
    "pps", "binBps", "Bps", "binbps", "bps", "KiBs", "Kibits", "KBs", "Kbits", "MiBs", "Mibits",
    "MBs", "Mbits", "GiBs", "Gibits", "GBs", "Gbits", "TiBs", "Tibits", "TBs", "Tbits", "PiBs",
    "Pibits", "PBs", "Pbits",
    # date and time
    "dateTimeAsIso", "dateTimeAsIsoNoDateIfToday", "dateTimeAsUS", "dateTimeAsUSNoDateIfToday",
    "dateTimeAsLocal", "dateTimeAsLocalNoDateIfToday", "dateTimeAsSystem", "dateTimeFromNow",
    # energy
    "watt", "kwatt", "megwatt", "gwatt", "mwatt", "Wm2", "voltamp", "kvoltamp", "voltampreact",
    "kvoltampreact", "watth", "watthperkg", "kwatth", "kwattm", "amph", "kamph", "mamph",
    "joule", "ev", "amp", "kamp", "mamp", "volt", "kvolt", "mvolt", "dBm", "ohm", "kohm", "Mohm",
    "farad", "µfarad", "nfarad", "pfarad", "ffarad", "henry", "mhenry", "µhenry", "lumens",
    # flow
    "flowgpm", "flowcms", "flowcfs", "flowcfm", "litreh", "flowlpm", "flowmlpm", "lux",
    # force, hash rate, mass, length
    "forceNm", "forcekNm", "forceN", "forcekN",
    "Hs", "KHs", "MHs", "GHs", "THs", "PHs", "EHs",
    "massmg", "massg", "masslb", "masskg", "masst",
    "lengthmm", "lengthin", "lengthft", "lengthm", "lengthkm", "lengthmi",
    # pressure
    "pressurembar", "pressurebar", "pressurekbar", "pressurepa", "pressurehpa", "pressurekpa",
    "pressurehg", "pressurepsi",
    # radiation
    "radbq", "radci", "radgy", "radrad", "radsv", "radmsv", "radusv", "radrem", "radexpckg",
    "radr", "radsvh", "radmsvh", "radusvh",
    # rotational speed, temperature
    "rotrpm", "rothz", "rotrads", "rotdegs",
    "celsius", "fahrenheit", "kelvin",
    # time
    "hertz", "ns", "µs", "ms", "s", "m", "h", "d", "dtdurationms", "dtdurations", "dthms",
    "dtdhms", "timeticks", "clockms", "clocks",
    # throughput
    "cps", "ops", "reqps", "rps", "wps", "iops", "cpm", "opm", "rpm", "wpm", "mps", "mpm",
    # velocity, volume, boolean
    "velocityms", "velocitykmh", "velocitymph", "velocityknot",
    "mlitre", "litre", "m3", "Nm3", "dm3", "gallons",
    "bool", "bool_yes_no", "bool_on_off",
))
