"""The tests' helpers: real agents, backends, engines, Lokis and the fakes at boundaries."""
