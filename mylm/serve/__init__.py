"""`mylm serve`: native tool calling for any model, behind the OpenAI, Anthropic and Ollama APIs."""
