"""One-line adapters for the frameworks' trainers (Hugging Face, Lightning) under `deepvm train`: see protocol."""
