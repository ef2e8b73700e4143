"""The instance catalog: the model (`model`), its JSON form (`json_form`), the files users give with
`--catalog` (`files`), the built-in dated snapshot (`snapshot`, data in `data/`), live AWS market data
(`market/`) and which of them a command works on (`sources`)."""
