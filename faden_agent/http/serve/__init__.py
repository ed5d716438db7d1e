"""An HTTP/1.1 server an attacker cannot exhaust, shared by the peer port and the reference
backend: one selector thread accepts, runs TLS handshakes and reads request heads under a
deadline; a bounded pool of threads answers complete heads (server.py). Every read and write
of a connection has a deadline (conn.py); past the connection cap the oldest waiting one goes.
"""
