"""Pure diagnosis core: parse OOM logs, classify the cause, recommend a fix. No I/O."""
