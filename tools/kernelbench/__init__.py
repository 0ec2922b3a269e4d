"""The KernelBench importer's modules (tools/kernelbench_import.py is the entry point)."""
