// Package php reads a PHP interpreter's state from outside its process:
// which PHP a process runs (php-fpm, the CLI, php-cgi, or a libphp
// embedded in a server), where its executor globals lie, and the
// function, class, file and line each of its frames (a zend_execute_data)
// stands for.
//
// PHP publishes no layout of its structures, and Debian's binaries carry
// no debug information (php-fpm8.2 is stripped; its debug file is in no
// package of the archive). So a layout is taken from what the binary
// itself says: it exports executor_globals, and it names its Zend engine's
// API ("API20220829,NTS"), which changes whenever its structures do; this
// package has a table of the structures' offsets for each API it knows
// (8.2's, checked in a test against the engine's own headers with a C
// compiler), and checks the table against the live process before use:
// the first function of the engine's function table must be
// zend_version, an internal function of that name, and the first class
// of its class table stdClass. Every function read afterwards is checked
// by its type, and each line by its instruction lying in its function's
// opcodes. An engine it does not know, or a layout that does not fit, is
// an error naming what could not be read, never a wrong frame.
//
// Only builds without thread safety (NTS, what php-fpm and the CLI are on
// Debian) are known: a thread-safe build keeps its globals per thread.
// x86-64 only. The package knows no BPF: the collector hands the Layout's
// offsets to its programs.
package php
