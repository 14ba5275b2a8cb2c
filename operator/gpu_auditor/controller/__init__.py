"""The kopf operator: watches pods, diagnoses failures, writes annotations and Events."""
