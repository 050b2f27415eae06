from drlcli.cli import main

main()
