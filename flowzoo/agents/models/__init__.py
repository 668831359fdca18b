"""What generates text: a Hugging Face policy and flowzoo's fast forward pass, role -> policy
routing (shared / isolated, full weights or LoRA), generation backends (transformers, vLLM),
served endpoints, who else may play a role, and the project's tiny base models (shipped
weights). Imports torch; never imports the training loop."""
