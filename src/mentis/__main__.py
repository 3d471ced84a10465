from mentis.entry import main

main()
