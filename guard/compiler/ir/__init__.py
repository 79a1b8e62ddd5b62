"""guard.compiler.ir: the typed graph IR (core), its op traits (ops), activation layouts, shape
functions and its one stable text form. Imports nothing else of the compiler."""
