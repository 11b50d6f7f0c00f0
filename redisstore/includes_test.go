package redisstore

import (
	"io/fs"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/warmpool/warmpool/lua"
)

// A luaFile is one file of Lua read for the static checks: the names it uses (any
// identifier that is not a field, a method or a keyword) and, for an include, the
// names its top-level lines define with the names each definition uses.
type luaFile struct {
	name string // "session_route.lua", or "lib/slots.lua"
	// include is the include's name ("slots"), "" for a script.
	include string
	uses    map[string]bool
	defines map[string]map[string]bool
	// declared are the includes its header declares (-- uses:).
	declared []string
}

var (
	luaKeywords = strings.Fields("and break do else elseif end false for function if in local nil not or repeat return then true until while")
	// topLevelDef is a line of an include that defines names: "local function f(" or
	// "local A, B = ".
	topLevelDef = regexp.MustCompile(`^local (?:function ([A-Za-z_]\w*)|([A-Za-z_][\w, ]*?)\s*=)`)
	anyLocal    = regexp.MustCompile(`\blocal (?:function )?([A-Za-z_][\w, ]*)`)
)

// luaCode is src without its comments, and with every string literal emptied, so
// that only code is left to read names from.
func luaCode(src string) string {
	var b strings.Builder
	for i := 0; i < len(src); i++ {
		switch c := src[i]; {
		case strings.HasPrefix(src[i:], "--"):
			for i < len(src) && src[i] != '\n' {
				i++
			}
			b.WriteByte('\n')
		case c == '\'' || c == '"':
			for i++; i < len(src) && src[i] != c; i++ {
				if src[i] == '\\' {
					i++
				}
			}
			b.WriteString("''")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// luaNames are the names code uses: identifiers that follow neither a "." (a field;
// ".." concatenates) nor a ":" (a method), keywords left out.
func luaNames(code string) map[string]bool {
	names := map[string]bool{}
	word := func(c byte) bool {
		return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
	}
	for i := 0; i < len(code); {
		if !word(code[i]) {
			i++
			continue
		}
		j := i
		for j < len(code) && word(code[j]) {
			j++
		}
		p := i - 1
		for p >= 0 && code[p] == ' ' {
			p--
		}
		field := p >= 0 && (code[p] == ':' || code[p] == '.' && (p == 0 || code[p-1] != '.'))
		if w := code[i:j]; !field && (w[0] < '0' || w[0] > '9') && !slices.Contains(luaKeywords, w) {
			names[w] = true
		}
		i = j
	}
	return names
}

// readLua reads every script and every file of lib/.
func readLua(t *testing.T) (scriptFiles, includeFiles []*luaFile) {
	t.Helper()
	read := func(path string) (*luaFile, string) {
		b, err := lua.Files.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		return &luaFile{name: path, uses: luaNames(luaCode(src)), declared: declaredUses(src)}, src
	}
	for name := range scripts {
		f, _ := read(name)
		scriptFiles = append(scriptFiles, f)
	}
	libs, err := fs.Glob(lua.Files, libDir+"*.lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range libs {
		f, src := read(file)
		f.include = strings.TrimSuffix(path.Base(file), ".lua")
		f.defines = map[string]map[string]bool{}
		// Each top-level definition runs to the next one: its lines are what it uses.
		var names []string
		var lines []string
		flush := func() {
			uses := luaNames(luaCode(strings.Join(lines, "\n")))
			for _, n := range names {
				f.defines[n] = uses
			}
		}
		for line := range strings.Lines(src) {
			if m := topLevelDef.FindStringSubmatch(line); m != nil {
				flush()
				names, lines = nil, nil
				for n := range strings.SplitSeq(m[1]+m[2], ",") {
					names = append(names, strings.TrimSpace(n))
				}
			}
			lines = append(lines, line)
		}
		flush()
		includeFiles = append(includeFiles, f)
	}
	slices.SortFunc(scriptFiles, func(a, b *luaFile) int { return strings.Compare(a.name, b.name) })
	return scriptFiles, includeFiles
}

// helperHomes maps each name an include defines to the include.
func helperHomes(t *testing.T, includeFiles []*luaFile) map[string]string {
	t.Helper()
	homes := map[string]string{}
	for _, f := range includeFiles {
		for n := range f.defines {
			if other, ok := homes[n]; ok {
				t.Errorf("%s is defined in lib/%s.lua and in lib/%s.lua", n, other, f.include)
			}
			homes[n] = f.include
		}
	}
	return homes
}

// Every script and every include declares (-- uses:) each include whose helpers it
// calls, and only those; lib/keys.lua, which opens every script, and lib/guard.lua
// are not declared. No file defines a local of a helper's name, and every include
// reaches some script.
func TestIncludesAreDeclared(t *testing.T) {
	scriptFiles, includeFiles := readLua(t)
	homes := helperHomes(t, includeFiles)
	reached := map[string]bool{}
	for _, f := range slices.Concat(scriptFiles, includeFiles) {
		need := map[string][]string{}
		for n := range f.uses {
			if home, ok := homes[n]; ok && home != f.include && home != "keys" {
				need[home] = append(need[home], n)
			}
		}
		for _, home := range slices.Sorted(maps.Keys(need)) {
			if !slices.Contains(f.declared, home) {
				slices.Sort(need[home])
				t.Errorf("%s calls %v of lib/%s.lua but does not declare it: add it to its header's %q line", f.name, need[home], home, usesLine)
			}
		}
		for _, d := range f.declared {
			if need[d] == nil {
				t.Errorf("%s declares %q but uses none of lib/%s.lua", f.name, d, d)
			}
		}
		b, _ := lua.Files.ReadFile(f.name)
		for _, m := range anyLocal.FindAllStringSubmatch(luaCode(string(b)), -1) {
			for n := range strings.SplitSeq(m[1], ",") {
				if home, ok := homes[strings.TrimSpace(n)]; ok && home != f.include {
					t.Errorf("%s defines a local %s, the name of a helper of lib/%s.lua", f.name, strings.TrimSpace(n), home)
				}
			}
		}
		if f.include == "" {
			uses, err := resolveUses(f.declared)
			if err != nil {
				t.Errorf("%s: %v", f.name, err)
			}
			for _, u := range uses {
				reached[u] = true
			}
		}
	}
	for _, f := range includeFiles {
		if f.include != "keys" && f.include != "guard" && !reached[f.include] {
			t.Errorf("no script uses lib/%s.lua", f.include)
		}
	}
}

// A script reaches note_due (calls it, or a helper that does, at any depth) if and
// only if lua.go marks it notes: a note made in any other script would go nowhere
// (it has no due key, and Store.call would not read the note off its answer), and
// a script marked notes that never notes takes the due keys for nothing.
func TestNoteDueOnlyInNotesScripts(t *testing.T) {
	scriptFiles, includeFiles := readLua(t)
	homes := helperHomes(t, includeFiles)
	defs := map[string]map[string]bool{}
	for _, f := range includeFiles {
		maps.Copy(defs, f.defines)
	}
	for _, f := range scriptFiles {
		// path is how the script reaches each helper: the chain of calls to it.
		path := map[string][]string{}
		var walk func(uses map[string]bool, via []string)
		walk = func(uses map[string]bool, via []string) {
			for _, n := range slices.Sorted(maps.Keys(uses)) {
				if _, ok := homes[n]; !ok || path[n] != nil {
					continue
				}
				path[n] = append(slices.Clone(via), n)
				walk(defs[n], path[n])
			}
		}
		walk(f.uses, nil)
		notes := scripts[f.name].due
		switch chain := path["note_due"]; {
		case chain != nil && !notes:
			t.Errorf("%s reaches note_due (%s) but is not marked notes in lua.go", f.name, strings.Join(chain, " -> "))
		case chain == nil && notes:
			t.Errorf("%s is marked notes in lua.go but never reaches note_due", f.name)
		}
	}
}

// In the source Redis runs, every helper is defined before any line that names it: a
// local named before its definition would be read as a global, which fails only when
// the line runs, where loading the script on a server does not see it.
func TestHelpersAreDefinedBeforeUse(t *testing.T) {
	_, includeFiles := readLua(t)
	homes := helperHomes(t, includeFiles)
	for name, src := range Sources {
		defined := map[string]bool{}
		for line := range strings.Lines(luaCode(src)) {
			if m := topLevelDef.FindStringSubmatch(line); m != nil {
				for n := range strings.SplitSeq(m[1]+m[2], ",") {
					defined[strings.TrimSpace(n)] = true
				}
			}
			for n := range luaNames(line) {
				if home, ok := homes[n]; ok && !defined[n] {
					t.Errorf("%s names %s (lib/%s.lua) before its definition: %q", name, n, home, strings.TrimSpace(line))
				}
			}
		}
	}
}
