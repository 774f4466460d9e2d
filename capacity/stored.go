package capacity

import (
	"reflect"

	"github.com/sloprober/sloprober/internal/safetext"
)

// MaxStoredString bounds each string of a stored run as it is read back:
// a verdict's reason is a few hundred bytes, a test's configuration as
// YAML a few kilobytes.
const MaxStoredString = 16 << 10

// cleanStrings makes every string reachable from v (struct fields, slices,
// map keys and values, pointers) safe to show and bounded, as
// safetext.Text does: a run is written by sloprober, but the store is a
// directory anyone with access can edit, and `report show` prints what it
// reads. A hand-edited reason with ESC sequences or U+202E would act on
// the operator's terminal, and one of 20 MB would be rendered whole.
func cleanStrings(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			cleanStrings(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Field(i); f.CanSet() {
				cleanStrings(f)
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			cleanStrings(v.Index(i))
		}
	case reflect.Map:
		if v.IsNil() || !v.CanSet() {
			return
		}
		clean := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			k := reflect.New(v.Type().Key()).Elem()
			k.Set(it.Key())
			cleanStrings(k)
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(it.Value())
			cleanStrings(e)
			clean.SetMapIndex(k, e)
		}
		v.Set(clean)
	case reflect.String:
		if s := v.String(); v.CanSet() {
			if c := safetext.Text(s, MaxStoredString); c != s {
				v.SetString(c)
			}
		}
	}
}
