from amprewrite.cli import main

main()
