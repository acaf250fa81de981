"""The command line: thin modules that parse, build a config and call one library function."""
