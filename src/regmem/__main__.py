from regmem.lab.cli import main

main()
