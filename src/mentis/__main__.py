from mentis.cli import main

main()
