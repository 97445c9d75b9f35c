"""The foundation every layer stands on: user directories (`paths`), the one rooted error tree (`errors`), the
frozen values and events (`types`), cancel tokens (`cancel`), redaction (`redact`), a snapshot of the
environment (`environ`), text cleaning (`decoding`), JSON-Schema references (`jsonref`) and counted nouns
(`words`). Each imports nothing of mylm above this package, and this package root imports nothing, so naming
one module never loads the others."""
