from grpoctl.cli import main

main()
