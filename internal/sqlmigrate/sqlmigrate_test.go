package sqlmigrate

import (
	"reflect"
	"strings"
	"testing"
	"testing/fstest"
)

func TestLoad(t *testing.T) {
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	t.Run("in number order", func(t *testing.T) {
		fsys := fstest.MapFS{
			"m/0002_b.sql":   file("B"),
			"m/0001_a.sql":   file("A"),
			"m/README.md":    file("not a step"),
			"other/0003.sql": file("elsewhere"),
		}
		got, err := Load(fsys, "m")
		if err != nil {
			t.Fatal(err)
		}
		want := []Step{{"0001_a", "A"}, {"0002_b", "B"}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Load = %+v, want %+v", got, want)
		}
	})
	for _, tc := range []struct {
		name    string
		files   []string
		wantErr string
	}{
		{"empty", nil, "no .sql file"},
		{"gap", []string{"0001_a.sql", "0003_c.sql"}, "want 0002"},
		{"duplicate number", []string{"0001_a.sql", "0001_b.sql"}, "want 0002"},
		{"starts at 2", []string{"0002_a.sql"}, "want 0001"},
		{"no number", []string{"init.sql"}, "NNNN_words"},
		{"upper case", []string{"0001_Init.sql"}, "NNNN_words"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := fstest.MapFS{"m/keep": file("")}
			for _, f := range tc.files {
				fsys["m/"+f] = file("SELECT 1")
			}
			_, err := Load(fsys, "m")
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Load(%v) = %v, want an error containing %q", tc.files, err, tc.wantErr)
			}
		})
	}
}
