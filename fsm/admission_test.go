package fsm

import (
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
)

// commandTypes type-checks this package's source (its non-test files, as
// go/build selects them; the standard library through its export data)
// and returns the name of every type declared in it, at package level or
// inside a function, that implements Command by value or by pointer
// (embedding included): the source of truth, not a hand-kept list.
func commandTypes(t *testing.T) []string {
	t.Helper()
	pkg, err := build.Default.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range pkg.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(pkg.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	info := &types.Info{Defs: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.Default()}
	tp, err := conf.Check(pkg.ImportPath, fset, files, info)
	if err != nil {
		t.Fatalf("type-checking the fsm package: %v", err)
	}
	cmd, _ := tp.Scope().Lookup("Command").(*types.TypeName)
	if cmd == nil {
		t.Fatal("the fsm package declares no Command")
	}
	iface, ok := cmd.Type().Underlying().(*types.Interface)
	if !ok {
		t.Fatalf("Command is a %s, not an interface", cmd.Type().Underlying())
	}
	var names []string
	for _, obj := range info.Defs {
		tn, ok := obj.(*types.TypeName)
		if !ok || tn.IsAlias() {
			continue
		}
		named, ok := tn.Type().(*types.Named)
		if !ok || types.IsInterface(named) {
			continue
		}
		if named.TypeParams().Len() > 0 {
			t.Errorf("%s is generic: classify its instances by hand and teach this test about them", tn.Name())
			continue
		}
		if types.Implements(named, iface) || types.Implements(types.NewPointer(named), iface) {
			names = append(names, tn.Name())
		}
	}
	sort.Strings(names)
	return names
}

// Every type that implements Command has a class in the admission table,
// keyed by its pointer type (what the API proposes), and the table names
// no other type.
func TestEveryCommandIsClassified(t *testing.T) {
	names := commandTypes(t)
	if len(names) < 8 {
		t.Fatalf("found only %d command types (%v): the enumeration is broken", len(names), names)
	}
	byName := map[string]Admission{}
	for rt, a := range admissions {
		if rt.Kind() != reflect.Pointer || rt.Elem().PkgPath() != reflect.TypeFor[Entry]().PkgPath() {
			t.Errorf("table key %s is not a pointer to a type of this package", rt)
			continue
		}
		byName[rt.Elem().Name()] = a
	}
	found := map[string]bool{}
	for _, n := range names {
		found[n] = true
		a, ok := byName[n]
		if !ok {
			t.Errorf("command type %s has no admission class: add it to the table in admission.go (SessionSecret if it acts for a session, else Exempt or NodeOnly with the reason)", n)
			continue
		}
		switch a.Class {
		case SessionSecret:
			if a.session == nil {
				t.Errorf("%s is SessionSecret without a session accessor", n)
			}
			if a.Reason != "" {
				t.Errorf("%s is SessionSecret with a reason to be exempt: %q", n, a.Reason)
			}
		case Exempt, NodeOnly:
			if a.Reason == "" {
				t.Errorf("%s is %s without a reason", n, a.Class)
			}
			if a.AdminMay || a.session != nil {
				t.Errorf("%s is %s but names a session", n, a.Class)
			}
		default:
			t.Errorf("%s has class %s", n, a.Class)
		}
	}
	for n := range byName {
		if !found[n] {
			t.Errorf("the admission table names %s, which does not implement Command", n)
		}
	}
	t.Logf("classified: %v", names)
}

// The accessor of every session-scoped command returns that command's own
// session and namespace: filled in by reflection, so a new command is
// checked without a hand-made example.
func TestSessionAccessorsNameTheCommandsSession(t *testing.T) {
	for rt, a := range admissions {
		if a.Class != SessionSecret {
			continue
		}
		v := reflect.New(rt.Elem())
		sf, nf := v.Elem().FieldByName("Session"), v.Elem().FieldByName("Namespace")
		if !sf.IsValid() || !nf.IsValid() {
			t.Errorf("%s acts for a session but has no Session and Namespace fields: check its accessor by hand", rt)
			continue
		}
		sf.SetUint(4242)
		nf.SetString("acc")
		cmd := v.Interface().(Command)
		id, ns, ok := a.Session(cmd)
		if !ok || id != 4242 || ns != "acc" {
			t.Errorf("%s: Session = %d %q %v, want 4242 \"acc\" true", rt, id, ns, ok)
		}
		if got, err := AdmissionOf(cmd); err != nil || got.Class != SessionSecret {
			t.Errorf("AdmissionOf(%s) = %v, %v", rt, got.Class, err)
		}
		// Another type's accessor does not read it; a nil pointer names no session.
		if _, _, ok := admissions[cmdType[Request]()].Session(&Abort{Session: 1}); ok {
			t.Error("Request's accessor read an Abort")
		}
		if _, _, ok := a.Session(reflect.Zero(rt).Interface().(Command)); ok {
			t.Errorf("%s: a nil pointer names a session", rt)
		}
	}
}

// Default deny: what the table lacks is an error, never a class.
func TestAdmissionOfRefusesWhatTheTableLacks(t *testing.T) {
	for _, cmd := range []Command{nil, Request{Session: 1}, CloseSession{Session: 1}, OpenSession{}} {
		if a, err := AdmissionOf(cmd); err == nil {
			t.Errorf("AdmissionOf(%T) = %s, want an error", cmd, a.Class)
		}
	}
	for cmd, want := range map[Command]AdmissionClass{
		&OpenSession{}: Exempt, &Request{}: SessionSecret, &SetLimits{}: NodeOnly,
		&SetMember{}: NodeOnly, &ExpireSession{}: NodeOnly, &SetRecord{}: SessionSecret,
	} {
		if a, err := AdmissionOf(cmd); err != nil || a.Class != want {
			t.Errorf("AdmissionOf(%T) = %s, %v; want %s", cmd, a.Class, err, want)
		}
	}
	// Only Request needs the secret even from an admin.
	for cmd, want := range map[Command]bool{&Request{}: false, &Release{}: true, &Abort{}: true, &CloseSession{}: true, &SetRecord{}: true} {
		if a, _ := AdmissionOf(cmd); a.AdminMay != want {
			t.Errorf("%T: AdminMay %v, want %v", cmd, a.AdminMay, want)
		}
	}
}
