// Package confdoc writes a configuration reference page from the type a
// strict decoder (ruleconfig.Decode) fills: every field it takes, walked by
// reflection as the decoder walks it, with its kind and the comment on the
// field in the source, which must be written for users. go run
// ./tests/docs/docgen writes rl-wasm-host's page; the proxy-wasm filter
// prints its own (its main package is not importable).
package confdoc

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"
)

// module is the module path, whose packages live under the root.
const module = "github.com/rlcore/rl"

// Page returns a reference page: header (the first lines, saying how it
// is generated), a title, intro, then a table of every field of shape
// (the type a configuration decodes into), read from the source under
// root (the module's root). mainDir is the directory of package main,
// from root, when shape or a type it holds is main's ("" if none).
func Page(root, mainDir string, shape reflect.Type, header, title, intro string) (string, error) {
	docs := fieldDocs{root: root, mainDir: mainDir, pkgs: map[string]map[string]*ast.StructType{}, seen: map[reflect.Type]string{}}
	var rows []string
	if err := docs.walk(shape, "", &rows); err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(header)
	b.WriteString("# " + title + "\n\n")
	b.WriteString(strings.TrimSpace(intro) + "\n\n")
	b.WriteString("| field | type | meaning |\n|---|---|---|\n")
	for _, r := range rows {
		b.WriteString(r)
	}
	return b.String(), nil
}

// fieldDocs finds the comments of struct fields in the source.
type fieldDocs struct {
	root    string
	mainDir string
	pkgs    map[string]map[string]*ast.StructType // import path → type name → struct
	seen    map[reflect.Type]string               // a list's item type → the path that listed its fields
}

// walk appends a row for every field of struct t under prefix.
func (d *fieldDocs) walk(t reflect.Type, prefix string, rows *[]string) error {
	for i := range t.NumField() {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		switch {
		case name == "-" || !sf.IsExported():
			continue
		case name == "" && sf.Anonymous && sf.Type.Kind() == reflect.Struct:
			if err := d.walk(sf.Type, prefix, rows); err != nil {
				return err
			}
			continue
		case name == "":
			continue
		}
		doc, err := d.doc(t, sf.Name)
		if err != nil {
			return err
		}
		if doc == "" {
			return fmt.Errorf("%s.%s (field %q) has no comment: the configuration reference needs one", t, sf.Name, prefix+name)
		}
		kind, elem := describe(sf.Type)
		path := prefix + name
		seen := ""
		if elem != nil && kind == "list of objects" {
			if seen = d.seen[elem]; seen == "" {
				d.seen[elem] = path + "[]"
			} else {
				doc += " Each has the fields of `" + seen + "`."
			}
		}
		*rows = append(*rows, fmt.Sprintf("| `%s` | %s | %s |\n", path, kind, strings.ReplaceAll(doc, "|", `\|`)))
		switch {
		case elem != nil && kind == "list of objects" && seen == "":
			err = d.walk(elem, path+"[].", rows)
		case kind == "object":
			err = d.walk(sf.Type, path+".", rows)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// describe names a field's kind as a user writes it: a scalar
// (ruleconfig.Value: its field V), a list (ruleconfig.List: its Items),
// or an object; elem is a list's item type.
func describe(t reflect.Type) (kind string, elem reflect.Type) {
	if v, ok := t.FieldByName("V"); ok {
		switch v.Type.Kind() {
		case reflect.String:
			return "string", nil
		case reflect.Int64:
			return "integer", nil
		case reflect.Bool:
			return "boolean", nil
		}
	}
	if items, ok := t.FieldByName("Items"); ok && items.Type.Kind() == reflect.Slice {
		e := items.Type.Elem()
		if k, _ := describe(e); k != "object" {
			return "list of " + k + "s", e
		}
		return "list of objects", e
	}
	if !tagged(t) {
		return "mapping", nil // decoded by its own UnmarshalJSON, keys of the user's choosing
	}
	return "object", nil
}

// tagged reports whether struct t, or a struct it embeds, has a field with
// a JSON name.
func tagged(t reflect.Type) bool {
	if t.Kind() != reflect.Struct {
		return false
	}
	for i := range t.NumField() {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name != "" && name != "-" || sf.Anonymous && tagged(sf.Type) {
			return true
		}
	}
	return false
}

// doc returns the comment of field name of struct t, as one line.
func (d *fieldDocs) doc(t reflect.Type, field string) (string, error) {
	structs, err := d.parse(t.PkgPath())
	if err != nil {
		return "", err
	}
	typeName, _, _ := strings.Cut(t.Name(), "[")
	st := structs[typeName]
	if st == nil {
		return "", fmt.Errorf("no struct %s in %s", typeName, t.PkgPath())
	}
	for _, f := range st.Fields.List {
		for _, n := range f.Names {
			if n.Name != field {
				continue
			}
			g := f.Doc
			if g == nil {
				g = f.Comment
			}
			if g == nil {
				return "", nil
			}
			return strings.Join(strings.Fields(g.Text()), " "), nil
		}
	}
	return "", fmt.Errorf("no field %s in struct %s", field, typeName)
}

// parse reads the structs of the package at import path pkg.
func (d *fieldDocs) parse(pkg string) (map[string]*ast.StructType, error) {
	if m, ok := d.pkgs[pkg]; ok {
		return m, nil
	}
	rel, ok := strings.CutPrefix(pkg, module+"/")
	if pkg == "main" && d.mainDir != "" {
		rel, ok = d.mainDir, true
	}
	if !ok {
		return nil, fmt.Errorf("package %s is not this module's", pkg)
	}
	dir := filepath.Join(d.root, filepath.FromSlash(rel))
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	m := map[string]*ast.StructType{}
	fset := token.NewFileSet()
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok {
				if st, ok := ts.Type.(*ast.StructType); ok {
					m[ts.Name.Name] = st
				}
			}
			return true
		})
	}
	d.pkgs[pkg] = m
	return m, nil
}
