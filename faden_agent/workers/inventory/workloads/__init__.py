"""Serving containers' own metrics: scraped one at a time within bounds (scrape.py), read for a
few known names (promtext.py), judged for forward progress (progress.py) by a thread of the
inventory worker (watcher.py)."""
