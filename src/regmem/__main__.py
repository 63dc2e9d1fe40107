from regmem.cli import main

main()
