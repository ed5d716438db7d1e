"""The Docker engine's API: its address, the API version negotiated with it, and a client on
http/client.py for what the workers read at idle (sdk.py: the Docker SDK, for commands only)."""
