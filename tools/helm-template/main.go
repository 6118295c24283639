// helm-template renders a Helm chart the way `helm template` does, for machines where Helm
// cannot be installed: Go's text/template with sprig (the library Helm uses) and Helm's own
// functions, Helm's values handling and its output format. Built offline from Debian's Go
// packages by scripts/helm-template.
//
//	helm-template [flags] NAME CHART
//
// Flags (as `helm template`): -n/--namespace, -f/--values (repeatable, "-" is stdin), --set,
// --set-string, --set-file, --kube-version, -a/--api-versions, -s/--show-only, --include-crds,
// --no-hooks, --is-upgrade, and --notes to print the rendered NOTES.txt after the manifests.
//
// Not supported: subcharts (charts/ and dependencies), values.schema.json validation, library
// charts, --set-json, --post-renderer, and `lookup` against a cluster (it returns an empty map,
// as in `helm template`).
package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/semver"
	"sigs.k8s.io/yaml"
)

// helmVersion is the Helm release whose behaviour this follows (sprig 3.2.3 era).
const helmVersion = "v3.11.0"

func warn(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "helm-template: warning: "+format+"\n", args...)
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "Error: "+format+"\n", args...)
	os.Exit(1)
}

type options struct {
	name, chart, namespace string
	valueFiles             []string
	sets, setStrings       []string
	setFiles               []string
	kubeVersion            string
	apiVersions            []string
	showOnly               []string
	includeCRDs, noHooks   bool
	isUpgrade, notes       bool
}

func parseArgs(args []string) (options, error) {
	o := options{namespace: "default", kubeVersion: "v1.20.0"}
	var positional []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" {
			positional = append(positional, a)
			continue
		}
		name, val, hasVal := strings.Cut(a, "=")
		takes := func() (string, error) {
			if hasVal {
				return val, nil
			}
			if i+1 >= len(args) {
				return "", fmt.Errorf("flag %s needs a value", name)
			}
			i++
			return args[i], nil
		}
		var err error
		var v string
		switch name {
		case "-n", "--namespace":
			o.namespace, err = takes()
		case "-f", "--values":
			v, err = takes()
			o.valueFiles = append(o.valueFiles, splitComma(v)...)
		case "--set":
			v, err = takes()
			o.sets = append(o.sets, v)
		case "--set-string":
			v, err = takes()
			o.setStrings = append(o.setStrings, v)
		case "--set-file":
			v, err = takes()
			o.setFiles = append(o.setFiles, v)
		case "--kube-version":
			o.kubeVersion, err = takes()
		case "-a", "--api-versions":
			v, err = takes()
			o.apiVersions = append(o.apiVersions, splitComma(v)...)
		case "-s", "--show-only":
			v, err = takes()
			o.showOnly = append(o.showOnly, v)
		case "--include-crds":
			o.includeCRDs = true
		case "--no-hooks":
			o.noHooks = true
		case "--is-upgrade":
			o.isUpgrade = true
		case "--notes":
			o.notes = true
		default:
			return o, fmt.Errorf("unknown flag %s", name)
		}
		if err != nil {
			return o, err
		}
	}
	if len(positional) != 2 {
		return o, fmt.Errorf("usage: helm-template [flags] NAME CHART (got %d arguments)", len(positional))
	}
	o.name, o.chart = positional[0], positional[1]
	return o, nil
}

func splitComma(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// releaseName is Helm's check: a DNS-1123 subdomain of at most 53 characters.
var releaseName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

func main() {
	o, err := parseArgs(os.Args[1:])
	if err != nil {
		fail("%v", err)
	}
	if !releaseName.MatchString(o.name) || len(o.name) > 53 {
		fail("invalid release name %q: a DNS-1123 subdomain of at most 53 characters", o.name)
	}
	c, err := loadChart(o.chart)
	if err != nil {
		fail("%v", err)
	}
	if err := c.checkKubeVersion(o.kubeVersion); err != nil {
		fail("%v", err)
	}
	vals, err := userValues(o)
	if err != nil {
		fail("%v", err)
	}
	values := coalesce(vals, c.values)
	out, notes, err := render(c, o, values)
	if err != nil {
		fail("%v", err)
	}
	os.Stdout.WriteString(out)
	if o.notes && notes != "" {
		fmt.Fprintf(os.Stdout, "NOTES:\n%s\n", notes)
	}
}

// userValues merges the overrides in Helm's order: -f files, then --set, --set-string and
// --set-file.
func userValues(o options) (map[string]interface{}, error) {
	base := map[string]interface{}{}
	for _, f := range o.valueFiles {
		var data []byte
		var err error
		if f == "-" {
			data, err = io.ReadAll(os.Stdin)
		} else {
			data, err = os.ReadFile(f)
		}
		if err != nil {
			return nil, err
		}
		m, err := readValues(data)
		if err != nil {
			return nil, fmt.Errorf("failed to parse %s: %w", f, err)
		}
		base = mergeMaps(base, m)
	}
	for _, group := range []struct {
		args []string
		mode setMode
		flag string
	}{{o.sets, setTyped, "--set"}, {o.setStrings, setString, "--set-string"}, {o.setFiles, setFile, "--set-file"}} {
		for _, a := range group.args {
			if err := parseSet(a, group.mode, base); err != nil {
				return nil, fmt.Errorf("failed parsing %s data: %w", group.flag, err)
			}
		}
	}
	return base, nil
}

// Metadata is Chart.yaml, with Helm's field names (templates read .Chart.Name, .Chart.AppVersion...).
type Metadata struct {
	Name         string            `json:"name,omitempty"`
	Home         string            `json:"home,omitempty"`
	Sources      []string          `json:"sources,omitempty"`
	Version      string            `json:"version,omitempty"`
	Description  string            `json:"description,omitempty"`
	Keywords     []string          `json:"keywords,omitempty"`
	Maintainers  []*Maintainer     `json:"maintainers,omitempty"`
	Icon         string            `json:"icon,omitempty"`
	APIVersion   string            `json:"apiVersion,omitempty"`
	Condition    string            `json:"condition,omitempty"`
	Tags         string            `json:"tags,omitempty"`
	AppVersion   string            `json:"appVersion,omitempty"`
	Deprecated   bool              `json:"deprecated,omitempty"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	KubeVersion  string            `json:"kubeVersion,omitempty"`
	Dependencies []interface{}     `json:"dependencies,omitempty"`
	Type         string            `json:"type,omitempty"`
}

type Maintainer struct {
	Name  string `json:"name,omitempty"`
	Email string `json:"email,omitempty"`
	URL   string `json:"url,omitempty"`
}

type chart struct {
	meta      Metadata
	values    map[string]interface{}
	templates map[string]string // path relative to the chart, e.g. templates/x.yaml
	crds      map[string]string // crds/*
	files     Files             // everything else, for .Files
}

func loadChart(dir string) (*chart, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return nil, fmt.Errorf("%s is not a chart: %w", dir, err)
	}
	c := &chart{templates: map[string]string{}, crds: map[string]string{}, files: Files{}}
	if err := yaml.Unmarshal(raw, &c.meta); err != nil {
		return nil, fmt.Errorf("Chart.yaml: %w", err)
	}
	if c.meta.APIVersion != "v1" && c.meta.APIVersion != "v2" {
		return nil, fmt.Errorf("Chart.yaml: apiVersion %q is not v1 or v2", c.meta.APIVersion)
	}
	if c.meta.Name == "" || c.meta.Version == "" {
		return nil, fmt.Errorf("Chart.yaml: name and version are required")
	}
	if _, err := semver.NewVersion(c.meta.Version); err != nil {
		return nil, fmt.Errorf("Chart.yaml: version %q is not semver: %w", c.meta.Version, err)
	}
	if c.meta.Type == "library" {
		return nil, fmt.Errorf("library charts cannot be rendered")
	}
	if len(c.meta.Dependencies) > 0 {
		return nil, fmt.Errorf("Chart.yaml: dependencies (subcharts) are not supported")
	}
	c.values = map[string]interface{}{}
	if raw, err := os.ReadFile(filepath.Join(dir, "values.yaml")); err == nil {
		if c.values, err = readValues(raw); err != nil {
			return nil, fmt.Errorf("values.yaml: %w", err)
		}
	} else if !os.IsNotExist(err) {
		return nil, err
	}
	ignore := readIgnore(dir)
	err = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if ignore.matches(rel, info.IsDir()) {
			if info.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if info.IsDir() {
			if rel == "charts" {
				if entries, _ := os.ReadDir(p); len(entries) > 0 {
					return fmt.Errorf("charts/: subcharts are not supported")
				}
			}
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		switch {
		case rel == "Chart.yaml" || rel == "values.yaml" || rel == "Chart.lock" || rel == "requirements.yaml" || rel == "requirements.lock":
		case rel == "values.schema.json":
			warn("values.schema.json is not validated")
		case strings.HasPrefix(rel, "templates/"):
			c.templates[rel] = string(data)
		default:
			if strings.HasPrefix(rel, "crds/") {
				c.crds[rel] = string(data)
			}
			c.files[rel] = data
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (c *chart) checkKubeVersion(v string) error {
	if c.meta.KubeVersion == "" {
		return nil
	}
	constraint, err := semver.NewConstraint(c.meta.KubeVersion)
	if err != nil {
		return fmt.Errorf("Chart.yaml: kubeVersion %q: %w", c.meta.KubeVersion, err)
	}
	kv, err := semver.NewVersion(v)
	if err != nil {
		return fmt.Errorf("--kube-version %q: %w", v, err)
	}
	if !constraint.Check(kv) {
		return fmt.Errorf("chart requires kubeVersion: %s which is incompatible with Kubernetes %s", c.meta.KubeVersion, v)
	}
	return nil
}

// ignoreRules is a .helmignore: one glob per line, `#` comments, a trailing `/` matching only
// directories, a leading `!` negating; a pattern without `/` matches the base name.
type ignoreRules []string

func readIgnore(dir string) ignoreRules {
	data, err := os.ReadFile(filepath.Join(dir, ".helmignore"))
	if err != nil {
		return nil
	}
	var rules ignoreRules
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") {
			rules = append(rules, l)
		}
	}
	return append(rules, ".helmignore")
}

func (r ignoreRules) matches(rel string, dir bool) bool {
	ignored := false
	for _, p := range r {
		neg := strings.HasPrefix(p, "!")
		p = strings.TrimPrefix(p, "!")
		if strings.HasSuffix(p, "/") {
			if !dir {
				continue
			}
			p = strings.TrimSuffix(p, "/")
		}
		target := rel
		if !strings.Contains(p, "/") {
			target = path.Base(rel)
		}
		if ok, _ := path.Match(strings.TrimPrefix(p, "/"), target); ok {
			ignored = !neg
		}
	}
	return ignored
}

// Files is .Files: the chart's files outside templates/.
type Files map[string][]byte

func (f Files) GetBytes(name string) []byte { return f[name] }
func (f Files) Get(name string) string      { return string(f[name]) }

// Glob returns the files whose path matches pattern (path.Match syntax; no `**`).
func (f Files) Glob(pattern string) Files {
	out := Files{}
	for name, data := range f {
		if ok, _ := path.Match(pattern, name); ok {
			out[name] = data
		}
	}
	return out
}

// Lines splits a file into lines.
func (f Files) Lines(name string) []string {
	s := string(f[name])
	if s == "" {
		return []string{}
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// AsConfig is the files as ConfigMap data (base name → content), as YAML.
func (f Files) AsConfig() string {
	m := map[string]string{}
	for name, data := range f {
		m[path.Base(name)] = string(data)
	}
	return toYAML(m)
}

// AsSecrets is the files as Secret data (base name → base64), as YAML.
func (f Files) AsSecrets() string {
	m := map[string][]byte{}
	for name, data := range f {
		m[path.Base(name)] = data
	}
	return toYAML(m)
}

// Capabilities is .Capabilities; APIVersions.Has answers from the built-in versions plus -a.
type Capabilities struct {
	APIVersions VersionSet
	KubeVersion KubeVersion
	HelmVersion HelmVersion
}

type VersionSet []string

func (v VersionSet) Has(apiVersion string) bool {
	for _, x := range v {
		if x == apiVersion {
			return true
		}
	}
	return false
}

type KubeVersion struct {
	Version, Major, Minor string
}

func (k KubeVersion) String() string     { return k.Version }
func (k KubeVersion) GitVersion() string { return k.Version }

type HelmVersion struct {
	Version, GitCommit, GitTreeState, GoVersion string
}

// builtinAPIVersions are the group/versions of a Kubernetes 1.20 API server.
var builtinAPIVersions = []string{
	"v1", "admissionregistration.k8s.io/v1", "admissionregistration.k8s.io/v1beta1",
	"apiextensions.k8s.io/v1", "apiextensions.k8s.io/v1beta1", "apiregistration.k8s.io/v1",
	"apiregistration.k8s.io/v1beta1", "apps/v1", "authentication.k8s.io/v1",
	"authentication.k8s.io/v1beta1", "authorization.k8s.io/v1", "authorization.k8s.io/v1beta1",
	"autoscaling/v1", "autoscaling/v2beta1", "autoscaling/v2beta2", "batch/v1", "batch/v1beta1",
	"certificates.k8s.io/v1", "certificates.k8s.io/v1beta1", "coordination.k8s.io/v1",
	"coordination.k8s.io/v1beta1", "discovery.k8s.io/v1beta1", "events.k8s.io/v1",
	"events.k8s.io/v1beta1", "extensions/v1beta1", "flowcontrol.apiserver.k8s.io/v1beta1",
	"networking.k8s.io/v1", "networking.k8s.io/v1beta1", "node.k8s.io/v1", "node.k8s.io/v1beta1",
	"policy/v1beta1", "rbac.authorization.k8s.io/v1", "rbac.authorization.k8s.io/v1beta1",
	"scheduling.k8s.io/v1", "scheduling.k8s.io/v1beta1", "storage.k8s.io/v1",
	"storage.k8s.io/v1beta1",
}

func capabilities(o options) Capabilities {
	v := o.kubeVersion
	if !strings.HasPrefix(v, "v") {
		v = "v" + v
	}
	major, minor := "", ""
	if sv, err := semver.NewVersion(v); err == nil {
		major, minor = fmt.Sprint(sv.Major()), fmt.Sprint(sv.Minor())
	}
	versions := append(VersionSet{}, builtinAPIVersions...)
	versions = append(versions, o.apiVersions...)
	return Capabilities{
		APIVersions: versions,
		KubeVersion: KubeVersion{Version: v, Major: major, Minor: minor},
		HelmVersion: HelmVersion{Version: helmVersion, GitTreeState: "clean", GoVersion: "helm-template"},
	}
}

// sortedTemplateNames orders templates as Helm parses them (a later `define` of the same name
// wins): more path segments first, then by name, descending.
func sortedTemplateNames(m map[string]string) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := names[i], names[j]
		ca, cb := strings.Count(a, "/"), strings.Count(b, "/")
		if ca != cb {
			return ca > cb
		}
		return a > b
	})
	return names
}

var execLocation = regexp.MustCompile(`^template: ([^:]+:\d+(?::\d+)?): (.*)$`)

func render(c *chart, o options, values map[string]interface{}) (string, string, error) {
	top := map[string]interface{}{
		"Chart":        c.meta,
		"Capabilities": capabilities(o),
		"Release": map[string]interface{}{
			"Name":      o.name,
			"Namespace": o.namespace,
			"IsUpgrade": o.isUpgrade,
			"IsInstall": !o.isUpgrade,
			"Revision":  1,
			"Service":   "Helm",
		},
		"Values":    values,
		"Files":     c.files,
		"Subcharts": map[string]interface{}{},
	}
	t := template.New("gotpl").Option("missingkey=zero").Funcs(baseFuncs())
	bindFuncs(t)
	names := sortedTemplateNames(c.templates)
	for _, rel := range names {
		full := path.Join(c.meta.Name, rel)
		if _, err := t.New(full).Parse(c.templates[rel]); err != nil {
			return "", "", fmt.Errorf("parse error in %s: %w", full, err)
		}
	}
	type manifest struct {
		source, content, kind string
		hook                  bool
	}
	var manifests []manifest
	notes := ""
	sort.Strings(names)
	for _, rel := range names {
		if strings.HasPrefix(path.Base(rel), "_") {
			continue // partials: parsed for their definitions, never rendered
		}
		full := path.Join(c.meta.Name, rel)
		top["Template"] = map[string]interface{}{"Name": full, "BasePath": path.Join(c.meta.Name, "templates")}
		var buf strings.Builder
		if err := t.ExecuteTemplate(&buf, full, top); err != nil {
			return "", "", execError(full, err)
		}
		text := strings.ReplaceAll(buf.String(), "<no value>", "")
		if strings.HasSuffix(rel, "NOTES.txt") {
			notes = text
			continue
		}
		for _, doc := range splitManifests(text) {
			var head struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Annotations map[string]string `json:"annotations"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				return "", "", fmt.Errorf("YAML parse error on %s: %w", full, err)
			}
			var whole interface{}
			if err := yaml.Unmarshal([]byte(doc), &whole); err != nil {
				return "", "", fmt.Errorf("YAML parse error on %s: %w", full, err)
			}
			_, hook := head.Metadata.Annotations["helm.sh/hook"]
			manifests = append(manifests, manifest{source: full, content: doc, kind: head.Kind, hook: hook})
		}
	}
	for _, s := range o.showOnly {
		found := false
		for _, m := range manifests {
			found = found || m.source == s || m.source == path.Join(c.meta.Name, s)
		}
		if !found {
			return "", "", fmt.Errorf("could not find template %s in chart", s)
		}
	}
	sort.SliceStable(manifests, func(i, j int) bool { return lessByKind(manifests[i].kind, manifests[j].kind) })
	var out bytes.Buffer
	if o.includeCRDs && len(o.showOnly) == 0 {
		crdNames := make([]string, 0, len(c.crds))
		for n := range c.crds {
			crdNames = append(crdNames, n)
		}
		sort.Strings(crdNames)
		for _, n := range crdNames {
			fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", path.Join(c.meta.Name, n), c.crds[n])
		}
	}
	shown := func(m manifest) bool {
		if len(o.showOnly) == 0 {
			return true
		}
		for _, s := range o.showOnly {
			if m.source == s || m.source == path.Join(c.meta.Name, s) {
				return true
			}
		}
		return false
	}
	for _, hooks := range []bool{false, true} {
		for _, m := range manifests {
			if m.hook != hooks || (hooks && o.noHooks) || !shown(m) {
				continue
			}
			fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", m.source, m.content)
		}
	}
	return out.String(), notes, nil
}

// execError makes text/template's errors read like Helm's: the location, then the message
// (`required` messages unwrapped).
func execError(name string, err error) error {
	msg := err.Error()
	if i := strings.Index(msg, requiredStart); i >= 0 {
		if j := strings.Index(msg, requiredEnd); j > i {
			loc := name
			if m := execLocation.FindStringSubmatch(msg); m != nil {
				loc = m[1]
			}
			return fmt.Errorf("execution error at (%s): %s", loc, msg[i+len(requiredStart):j])
		}
	}
	if m := execLocation.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("template: %s: %s", m[1], m[2])
	}
	return fmt.Errorf("execution error in %s: %w", name, err)
}

var docSeparator = regexp.MustCompile(`(?:^|\s*\n)---\s*`)

// splitManifests splits rendered text into YAML documents as Helm does, dropping empty ones and
// trimming each.
func splitManifests(text string) []string {
	var out []string
	for _, d := range docSeparator.Split(strings.TrimSpace(text), -1) {
		d = strings.TrimSpace(d)
		if d != "" {
			out = append(out, d)
		}
	}
	return out
}

// installOrder is Helm's InstallOrder: kinds applied first come first in the output.
var installOrder = []string{
	"PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange",
	"PodSecurityPolicy", "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList",
	"ConfigMap", "StorageClass", "PersistentVolume", "PersistentVolumeClaim",
	"CustomResourceDefinition", "ClusterRole", "ClusterRoleList", "ClusterRoleBinding",
	"ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList", "Service",
	"DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment",
	"HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress",
	"APIService",
}

func lessByKind(a, b string) bool {
	rank := func(k string) (int, bool) {
		for i, x := range installOrder {
			if x == k {
				return i, true
			}
		}
		return 0, false
	}
	ra, aok := rank(a)
	rb, bok := rank(b)
	switch {
	case !aok && !bok:
		return a < b
	case !aok:
		return false
	case !bok:
		return true
	}
	return ra < rb
}
