from faden_agent.cli import main

main()
