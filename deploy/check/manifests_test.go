package check

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// shapesDir holds one directory per deployment shape, each a set of
// manifests applied together (kubectl apply -f DIR).
const shapesDir = "../kubernetes"

// apiTypes are the kinds the manifests may hold, by apiVersion and kind,
// each with the Go type it must decode into.
var apiTypes = map[string]func() any{
	"apps/v1 StatefulSet":           func() any { return &appsv1.StatefulSet{} },
	"apps/v1 Deployment":            func() any { return &appsv1.Deployment{} },
	"v1 Service":                    func() any { return &corev1.Service{} },
	"v1 Secret":                     func() any { return &corev1.Secret{} },
	"v1 ConfigMap":                  func() any { return &corev1.ConfigMap{} },
	"policy/v1 PodDisruptionBudget": func() any { return &policyv1.PodDisruptionBudget{} },
}

// decodeStrict decodes one YAML document into the API type its apiVersion
// and kind name: an unknown or misspelt field, a duplicate key or a value
// of the wrong type is an error, as the API server's strict field
// validation would make it.
func decodeStrict(doc []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, err
	}
	newObj, ok := apiTypes[tm.APIVersion+" "+tm.Kind]
	if !ok {
		return nil, fmt.Errorf("apiVersion %q kind %q is none of the kinds this check knows", tm.APIVersion, tm.Kind)
	}
	obj := newObj()
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	return obj, nil
}

// documents splits a YAML stream at its "---" lines and drops empty
// documents (comments only).
func documents(data []byte) [][]byte {
	var docs [][]byte
	for _, d := range bytes.Split(data, []byte("\n---")) {
		var probe any
		if yaml.Unmarshal(d, &probe) == nil && probe != nil {
			docs = append(docs, d)
		}
	}
	return docs
}

// shape is one directory of manifests, decoded.
type shape struct {
	dir      string
	workload metav1.Object // the StatefulSet or Deployment
	template *corev1.PodTemplateSpec
	selector *metav1.LabelSelector
	services []*corev1.Service
	secrets  []*corev1.Secret
	configs  []*corev1.ConfigMap
	pdbs     []*policyv1.PodDisruptionBudget
	objects  int
}

// loadShapes decodes every manifest of every shape, failing the test on
// the first document that does not decode strictly.
func loadShapes(t *testing.T) []*shape {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(shapesDir, "*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no shapes under %s: %v", shapesDir, err)
	}
	var shapes []*shape
	for _, dir := range dirs {
		files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		s := &shape{dir: dir}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for i, doc := range documents(data) {
				obj, err := decodeStrict(doc)
				if err != nil {
					t.Fatalf("%s, document %d: %v", f, i+1, err)
				}
				s.add(t, obj)
			}
		}
		if s.template == nil {
			t.Fatalf("%s: no StatefulSet or Deployment", dir)
		}
		shapes = append(shapes, s)
	}
	return shapes
}

func (s *shape) add(t *testing.T, obj any) {
	t.Helper()
	s.objects++
	switch o := obj.(type) {
	case *appsv1.StatefulSet:
		s.setWorkload(t, o, &o.Spec.Template, o.Spec.Selector)
	case *appsv1.Deployment:
		s.setWorkload(t, o, &o.Spec.Template, o.Spec.Selector)
	case *corev1.Service:
		s.services = append(s.services, o)
	case *corev1.Secret:
		s.secrets = append(s.secrets, o)
	case *corev1.ConfigMap:
		s.configs = append(s.configs, o)
	case *policyv1.PodDisruptionBudget:
		s.pdbs = append(s.pdbs, o)
	}
}

func (s *shape) setWorkload(t *testing.T, w metav1.Object, tmpl *corev1.PodTemplateSpec, sel *metav1.LabelSelector) {
	t.Helper()
	if s.workload != nil {
		t.Fatalf("%s: two workloads, %s and %s", s.dir, s.workload.GetName(), w.GetName())
	}
	s.workload, s.template, s.selector = w, tmpl, sel
}

// container is the shape's bucketd container.
func (s *shape) container(t *testing.T) *corev1.Container {
	t.Helper()
	for i := range s.template.Spec.Containers {
		if c := &s.template.Spec.Containers[i]; c.Name == "bucketd" {
			return c
		}
	}
	t.Fatalf("%s: no container named bucketd", s.dir)
	return nil
}

// configMap returns the shape's ConfigMap name, nil when there is none.
func (s *shape) configMap(name string) *corev1.ConfigMap {
	for _, cm := range s.configs {
		if cm.Name == name {
			return cm
		}
	}
	return nil
}

// configFiles returns the files a read-only mount of a ConfigMap shows
// in the container, by mount path: one file per key of its data.
func (s *shape) configFiles(c *corev1.Container) map[string]map[string]string {
	files := map[string]map[string]string{}
	for _, m := range c.VolumeMounts {
		for _, v := range s.template.Spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil {
				if cm := s.configMap(v.ConfigMap.Name); cm != nil {
					files[m.MountPath] = cm.Data
				}
			}
		}
	}
	return files
}

// secretValue returns the value of key in the shape's Secret name.
func (s *shape) secretValue(name, key string) (string, error) {
	for _, sec := range s.secrets {
		if sec.Name != name {
			continue
		}
		if v, ok := sec.StringData[key]; ok {
			return v, nil
		}
		if v, ok := sec.Data[key]; ok {
			return string(v), nil
		}
		return "", fmt.Errorf("secret %s has no key %q", name, key)
	}
	return "", fmt.Errorf("no secret %s in %s", name, s.dir)
}

// TestManifestsDecodeStrictly: every manifest is an object of a known kind
// with only fields its API type has; both shapes are there.
func TestManifestsDecodeStrictly(t *testing.T) {
	var names []string
	for _, s := range loadShapes(t) {
		names = append(names, filepath.Base(s.dir))
		if len(s.services) == 0 || len(s.secrets) != 1 || len(s.configs) != 1 || len(s.pdbs) != 1 {
			t.Errorf("%s: %d services, %d secrets, %d ConfigMaps, %d PodDisruptionBudgets; want at least one, one, one, one",
				s.dir, len(s.services), len(s.secrets), len(s.configs), len(s.pdbs))
		}
		t.Logf("%s: %d objects decoded strictly", s.dir, s.objects)
	}
	if !slices.Equal(names, []string{"single", "store"}) {
		t.Errorf("shapes %v, want single and store", names)
	}
}

// TestStrictDecodingCatchesMistakes guards the check itself: a misspelt
// field, a field at the wrong level, a duplicate key and a wrong type each
// fail to decode.
func TestStrictDecodingCatchesMistakes(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(shapesDir, "single", "statefulset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	good := string(documents(data)[0])
	if _, err := decodeStrict([]byte(good)); err != nil {
		t.Fatalf("the manifest itself: %v", err)
	}
	for name, edit := range map[string][2]string{
		"misspelt field":  {"terminationGracePeriodSeconds:", "terminationGracePeriodSecond:"},
		"misplaced field": {"      containers:", "      replicas: 2\n      containers:"},
		"duplicate key":   {"  serviceName: bucketd", "  serviceName: bucketd\n  serviceName: other"},
		"wrong type":      {"replicas: 1", "replicas: one"},
		"unknown kind":    {"kind: StatefulSet", "kind: StatefulSett"},
	} {
		bad := strings.Replace(good, edit[0], edit[1], 1)
		if bad == good {
			t.Fatalf("%s: %q is not in the manifest", name, edit[0])
		}
		if _, err := decodeStrict([]byte(bad)); err == nil {
			t.Errorf("%s: decoded without error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}
