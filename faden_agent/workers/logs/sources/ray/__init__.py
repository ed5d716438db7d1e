"""The Ray log file source: tree discovery and watching, safe opens, tailing, retention."""
