"""`mylm serve`: native tool calling for any model, behind the OpenAI and Anthropic APIs."""
