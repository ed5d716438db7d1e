"""Disk as a budget and a hazard: free space, low and full disks, safe files, SQLite files."""
