package php

import (
	"fmt"
	"maps"
	"slices"
)

// Layout is where one Zend engine API keeps what this package (and the
// collector's programs) read: byte offsets within a structure, unless
// said otherwise.
type Layout struct {
	// API is the engine's API number (ZEND_MODULE_API_NO), which names
	// its release: 20220829 is PHP 8.2.
	API     uint32
	Release string

	// zend_executor_globals: the frame running now (NULL between
	// requests), the function table and the class table (HashTable*).
	EGCurrentExecuteData uint64
	EGFunctionTable      uint64
	EGClassTable         uint64

	// zend_execute_data: the instruction it is at (a zend_op*), its
	// function (a zend_function*), This's type info (a 32-bit word whose
	// upper bits are the call's flags) and its caller's frame.
	ExecOpline       uint64
	ExecFunc         uint64
	ExecThisTypeInfo uint64
	ExecPrev         uint64
	// CallTop is the flag of This's type info that marks the first frame
	// an invocation of the executor (execute_ex) runs: PHP code called
	// from C (the script itself, a callback of array_map...).
	CallTop uint32

	// zend_function: its type (a byte: FuncUser, FuncInternal, FuncEval),
	// name (zend_string*, NULL for a script's top level) and class
	// (zend_class_entry*); a user function's op_array: its number of
	// instructions (a uint32), the instructions, its file (zend_string*)
	// and first and last lines (uint32). FuncHeadSize covers them all.
	FuncType         uint64
	FuncName         uint64
	FuncScope        uint64
	OpArrayLast      uint64
	OpArrayOpcodes   uint64
	OpArrayFilename  uint64
	OpArrayLineStart uint64
	OpArrayLineEnd   uint64
	FuncHeadSize     uint64
	FuncUser         uint8
	FuncInternal     uint8
	FuncEval         uint8

	// zend_op: its size and its line (a uint32).
	OpSize   uint64
	OpLineno uint64

	// zend_string: its type info (a uint32 whose low 4 bits are the
	// type, StringType for a string), length and characters.
	StringTypeInfo uint64
	StringLen      uint64
	StringVal      uint64
	StringType     uint32

	// zend_class_entry: its name (zend_string*).
	ClassName uint64

	// HashTable: its flags (a uint32; HashPacked for a list without
	// keys), its buckets, how many it uses and has room for (uint32s).
	// Bucket: its size, value (a zval, whose first word is the pointer)
	// and key (zend_string*).
	HashFlags     uint64
	HashArData    uint64
	HashNumUsed   uint64
	HashTableSize uint64
	HashPacked    uint32
	BucketSize    uint64
	BucketVal     uint64
	BucketKey     uint64
}

// tables are the layouts of the engines this package knows, by API
// number: x86-64 builds without thread safety. TestTablesMatchHeaders
// checks each against the engine's headers (php8.2-dev), compiled.
var tables = map[uint32]Layout{
	20220829: {
		API: 20220829, Release: "8.2",
		EGCurrentExecuteData: 488, EGFunctionTable: 432, EGClassTable: 440,
		ExecOpline: 0, ExecFunc: 24, ExecThisTypeInfo: 40, ExecPrev: 48, CallTop: 1 << 17,
		FuncType: 0, FuncName: 8, FuncScope: 16,
		OpArrayLast: 80, OpArrayOpcodes: 88, OpArrayFilename: 152, OpArrayLineStart: 160, OpArrayLineEnd: 164,
		FuncHeadSize: 168, FuncUser: 2, FuncInternal: 1, FuncEval: 4,
		OpSize: 32, OpLineno: 24,
		StringTypeInfo: 4, StringLen: 16, StringVal: 24, StringType: 6,
		ClassName: 8,
		HashFlags: 8, HashArData: 16, HashNumUsed: 24, HashTableSize: 32, HashPacked: 1 << 2,
		BucketSize: 32, BucketVal: 0, BucketKey: 24,
	},
}

// layoutOf is the layout of API api.
func layoutOf(api uint32) (*Layout, error) {
	l, ok := tables[api]
	if !ok {
		return nil, fmt.Errorf("its engine's layout is not known (API %d; only %s)", api, knownAPIs())
	}
	return &l, nil
}

func knownAPIs() string {
	s := ""
	for _, api := range slices.Sorted(maps.Keys(tables)) {
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("API %d, PHP %s", api, tables[api].Release)
	}
	return s
}
