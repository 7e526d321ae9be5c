package php

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// headerProgram prints, for each field of Layout, what the engine's own
// headers say, as "Field value" lines: the same names and meanings as the
// table's.
const headerProgram = `
#include <stddef.h>
#include <stdio.h>
#include "php.h"
#include "zend_globals.h"
#define P(name, value) printf("%s %llu\n", name, (unsigned long long)(value))
int main(void) {
	P("API", ZEND_MODULE_API_NO);
	P("EGCurrentExecuteData", offsetof(zend_executor_globals, current_execute_data));
	P("EGFunctionTable", offsetof(zend_executor_globals, function_table));
	P("EGClassTable", offsetof(zend_executor_globals, class_table));
	P("ExecOpline", offsetof(zend_execute_data, opline));
	P("ExecFunc", offsetof(zend_execute_data, func));
	P("ExecThisTypeInfo", offsetof(zend_execute_data, This) + offsetof(zval, u1.type_info));
	P("ExecPrev", offsetof(zend_execute_data, prev_execute_data));
	P("CallTop", ZEND_CALL_TOP);
	P("FuncType", offsetof(zend_function, type));
	P("FuncName", offsetof(zend_function, common.function_name));
	P("FuncScope", offsetof(zend_function, common.scope));
	P("OpArrayLast", offsetof(zend_function, op_array.last));
	P("OpArrayOpcodes", offsetof(zend_function, op_array.opcodes));
	P("OpArrayFilename", offsetof(zend_function, op_array.filename));
	P("OpArrayLineStart", offsetof(zend_function, op_array.line_start));
	P("OpArrayLineEnd", offsetof(zend_function, op_array.line_end));
	P("FuncHeadSize", offsetof(zend_function, op_array.line_end) + sizeof(uint32_t));
	P("FuncUser", ZEND_USER_FUNCTION);
	P("FuncInternal", ZEND_INTERNAL_FUNCTION);
	P("FuncEval", ZEND_EVAL_CODE);
	P("OpSize", sizeof(zend_op));
	P("OpLineno", offsetof(zend_op, lineno));
	P("StringTypeInfo", offsetof(zend_string, gc.u.type_info));
	P("StringLen", offsetof(zend_string, len));
	P("StringVal", offsetof(zend_string, val));
	P("StringType", IS_STRING);
	P("ClassName", offsetof(zend_class_entry, name));
	P("HashFlags", offsetof(HashTable, u.flags));
	P("HashArData", offsetof(HashTable, arData));
	P("HashNumUsed", offsetof(HashTable, nNumUsed));
	P("HashTableSize", offsetof(HashTable, nTableSize));
	P("HashPacked", HASH_FLAG_PACKED);
	P("BucketSize", sizeof(Bucket));
	P("BucketVal", offsetof(Bucket, val.value.ptr));
	P("BucketKey", offsetof(Bucket, key));
#ifdef ZTS
	P("ZTS", 1);
#endif
	return 0;
}
`

// TestTablesMatchHeaders compiles headerProgram against the headers of
// each engine whose table this package has (php8.2-dev installs 8.2's
// under /usr/include/php/20220829) and checks every field of the table,
// and that the table has them all.
func TestTablesMatchHeaders(t *testing.T) {
	cc, err := exec.LookPath("cc")
	for api, table := range tables {
		dir := filepath.Join("/usr/include/php", strconv.Itoa(int(api)))
		if _, statErr := os.Stat(filepath.Join(dir, "main", "php.h")); statErr != nil || err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("API %d: needs a C compiler and the engine's headers in %s (php8.2-dev): %v %v", api, dir, err, statErr)
			}
			t.Skipf("API %d: no C compiler or no headers in %s (php8.2-dev)", api, dir)
		}
		tmp := t.TempDir()
		src := filepath.Join(tmp, "layout.c")
		if err := os.WriteFile(src, []byte(headerProgram), 0o644); err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(tmp, "layout")
		args := []string{"-w", "-o", bin, src}
		for _, sub := range []string{"", "main", "Zend", "TSRM"} {
			args = append(args, "-I", filepath.Join(dir, sub))
		}
		if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
			t.Fatalf("API %d: compiling: %v\n%s", api, err, out)
		}
		out, err := exec.Command(bin).Output()
		if err != nil {
			t.Fatal(err)
		}
		headers := map[string]uint64{}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			name, value, _ := strings.Cut(sc.Text(), " ")
			v, err := strconv.ParseUint(value, 10, 64)
			if err != nil {
				t.Fatalf("bad line %q", sc.Text())
			}
			headers[name] = v
		}
		if headers["ZTS"] != 0 {
			t.Errorf("API %d: the headers are a thread-safe build's", api)
		}
		v := reflect.ValueOf(table)
		checked := 0
		for i := range v.NumField() {
			name := v.Type().Field(i).Name
			if name == "Release" {
				continue
			}
			want, ok := headers[name]
			if !ok {
				t.Errorf("API %d: %s: the headers' program does not print it", api, name)
				continue
			}
			if got := v.Field(i).Uint(); got != want {
				t.Errorf("API %d: %s is %d in the table, %d in the headers", api, name, got, want)
			}
			checked++
		}
		t.Logf("API %d: %d fields as the headers say", api, checked)
	}
}
