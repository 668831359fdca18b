"""What generates text: a Hugging Face policy and flowzoo's fast forward pass, role -> policy
routing (shared / isolated, full weights or LoRA), generation backends (transformers, vLLM),
served endpoints and who else may play a role (the project's tiny base models are built in
:mod:`flowzoo.tiny`). Imports torch; never imports the training loop."""
