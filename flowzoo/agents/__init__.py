"""LLM policies and training: the only part of flowzoo that imports torch."""
