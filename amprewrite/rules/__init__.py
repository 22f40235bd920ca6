"""Rewrite rules: each turns analysis facts into edits (see `amprewrite.transform`) and notes."""
