from faden_agent.cli.launch import main

main()
