from faden_agent.launch import main

main()
