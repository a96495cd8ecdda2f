// Command quiclab-k8s-check validates quiclab's Kubernetes manifests offline.
//
//	quiclab-k8s-check DIR [MANIFEST...]
//
// DIR is a kustomization (deploy/k8s), built as `kubectl apply -k DIR` builds it; each MANIFEST
// is a file applied on its own (deploy/k8s/merge-job.yaml). Every object is decoded strictly (an
// unknown or duplicated field is an error) and passed through the create path of Kubernetes' own
// API server code (k8s.io/kubernetes, the version go.mod names): defaulting, the registry's
// preparation and validation of a Job or a PersistentVolumeClaim. What an API server does after
// that (admission, quotas, a node to run on) is not checked.
//
// Then it checks what quiclab needs the manifests to agree on: one Indexed Job of shards whose
// completion count, parallelism and QUICLAB_SHARDS are one number N, one shard pod per node,
// pods given the capabilities quiclab needs to make namespaces and TUN devices (and no more, not
// privileged), a merge Job for the same N running as an ordinary user of the group the shards
// share their directories with, no service account token and pinned images in both, and one
// results volume, mountable from several nodes, in both.
//
// It prints one line per problem (the file, the object, the field) and exits 1 if there is any;
// 2 for a usage error.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	"k8s.io/kubernetes/pkg/apis/batch"
	_ "k8s.io/kubernetes/pkg/apis/batch/install"
	"k8s.io/kubernetes/pkg/apis/core"
	_ "k8s.io/kubernetes/pkg/apis/core/install"
	"k8s.io/kubernetes/pkg/capabilities"
	jobstore "k8s.io/kubernetes/pkg/registry/batch/job"
	pvcstore "k8s.io/kubernetes/pkg/registry/core/persistentvolumeclaim"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

const namespace = "default"

// object is one manifest's object after the API server's create path.
type object struct {
	source string // the file it came from
	obj    runtime.Object
}

func (o object) String() string {
	switch v := o.obj.(type) {
	case *batch.Job:
		return fmt.Sprintf("%s: Job %s", o.source, v.Name)
	case *core.PersistentVolumeClaim:
		return fmt.Sprintf("%s: PersistentVolumeClaim %s", o.source, v.Name)
	}
	return o.source
}

type report struct{ problems []string }

func (r *report) add(format string, args ...any) {
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" {
		fmt.Fprintln(os.Stderr, "usage: quiclab-k8s-check DIR [MANIFEST...]\n\n"+
			"Validates quiclab's Kubernetes manifests offline: DIR is built as a kustomization\n"+
			"(`kubectl apply -k DIR`), each MANIFEST is a file applied on its own. Every object goes\n"+
			"through strict decoding and the API server's create-time defaulting and validation;\n"+
			"then the shard Job, the merge Job and the results volume must agree with each other.\n"+
			"Exits 1, a line per problem, if anything does not hold.")
		os.Exit(2)
	}
	// the messages of the API server's declarative validation go to klog; the problems are ours
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	// validated as by an API server that allows no privileged pod (kube-apiserver
	// --allow-privileged=false): quiclab's pods need none
	capabilities.Initialize(capabilities.Capabilities{AllowPrivileged: false})

	var r report
	var objects []object
	dir := os.Args[1]
	built, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		r.add("%s: kustomization: %v", dir, err)
	} else if yaml, err := built.AsYaml(); err != nil {
		r.add("%s: kustomization: %v", dir, err)
	} else {
		objects = append(objects, decodeAll(&r, dir+" (kustomization)", yaml)...)
	}
	for _, path := range os.Args[2:] {
		data, err := os.ReadFile(path)
		if err != nil {
			r.add("%v", err)
			continue
		}
		objects = append(objects, decodeAll(&r, path, data)...)
	}
	for _, o := range objects {
		create(&r, o)
	}
	agree(&r, objects)

	if len(r.problems) > 0 {
		for _, p := range r.problems {
			fmt.Println(p)
		}
		fmt.Printf("%d problem(s) in %d object(s)\n", len(r.problems), len(objects))
		os.Exit(1)
	}
	for _, o := range objects {
		fmt.Printf("%s: valid\n", o)
	}
	fmt.Printf("%d objects valid, and they agree\n", len(objects))
}

// decodeAll decodes each YAML document of data strictly into the API's internal types, with the
// defaults an API server applies.
func decodeAll(r *report, source string, data []byte) []object {
	decoder := serializer.NewCodecFactory(legacyscheme.Scheme, serializer.EnableStrict).UniversalDecoder()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []object
	for n := 1; ; n++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			r.add("%s: document %d: %v", source, n, err)
			return out
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, gvk, err := decoder.Decode(doc, nil, nil)
		if err != nil {
			// a strict decoding error names the unknown or duplicated fields
			r.add("%s: document %d: %v", source, n, err)
			continue
		}
		switch obj.(type) {
		case *batch.Job, *core.PersistentVolumeClaim:
			out = append(out, object{source: filepath.Clean(source), obj: obj})
		default:
			r.add("%s: document %d: %s is not one of quiclab's kinds (Job, PersistentVolumeClaim)", source, n, gvk)
		}
	}
}

// create runs the API server's create path for the object's resource: the registry strategy's
// preparation (a Job's generated selector and labels) and validation, in the default namespace.
func create(r *report, o object) {
	var strategy rest.RESTCreateStrategy
	var meta *metav1.ObjectMeta
	info := genericapirequest.RequestInfo{IsResourceRequest: true, Verb: "create", APIVersion: "v1", Namespace: namespace}
	switch v := o.obj.(type) {
	case *batch.Job:
		strategy, meta = jobstore.Strategy, &v.ObjectMeta
		info.APIGroup, info.Resource = "batch", "jobs"
	case *core.PersistentVolumeClaim:
		strategy, meta = pvcstore.Strategy, &v.ObjectMeta
		info.Resource = "persistentvolumeclaims"
	}
	if meta.Namespace == "" {
		meta.Namespace = namespace
	}
	info.Name = meta.Name
	rest.FillObjectMetaSystemFields(meta)
	ctx := genericapirequest.WithRequestInfo(genericapirequest.WithNamespace(context.Background(), namespace), &info)
	if err := rest.BeforeCreate(strategy, ctx, o.obj); err != nil {
		r.add("%s: %v", o, err)
	}
}

// agree checks what quiclab's deployment needs of its objects together.
func agree(r *report, objects []object) {
	var shards, merges []object
	claims := map[string]*core.PersistentVolumeClaim{}
	for _, o := range objects {
		switch v := o.obj.(type) {
		case *batch.Job:
			if v.Spec.CompletionMode != nil && *v.Spec.CompletionMode == batch.IndexedCompletion {
				shards = append(shards, o)
			} else if strings.Contains(script(v), "quiclab merge") {
				merges = append(merges, o)
			} else {
				r.add("%s: neither the Indexed Job of shards nor a Job that runs `quiclab merge`", o)
			}
		case *core.PersistentVolumeClaim:
			claims[v.Name] = v
			if !slices.Contains(v.Spec.AccessModes, core.ReadWriteMany) {
				r.add("%s: spec.accessModes: %v: the shards' pods on several nodes each write to it: ReadWriteMany is needed", o, v.Spec.AccessModes)
			}
		}
	}
	if len(shards) != 1 {
		r.add("%d Indexed Jobs of shards (completionMode: Indexed) among the manifests; one is needed", len(shards))
	}
	if len(merges) != 1 {
		r.add("%d Jobs that run `quiclab merge` among the manifests; one is needed", len(merges))
	}
	n := -1
	var results string // the claim the shards write to
	for _, o := range shards {
		job := o.obj.(*batch.Job)
		n, results = checkShards(r, o, job, claims)
	}
	for _, o := range append(slices.Clone(shards), merges...) {
		hardened(r, o, o.obj.(*batch.Job))
	}
	for _, o := range merges {
		job := o.obj.(*batch.Job)
		c := onlyContainer(r, o, job)
		if c == nil {
			continue
		}
		gid := unprivileged(r, o, job, c)
		for _, s := range shards {
			sc := s.obj.(*batch.Job).Spec.Template.Spec.Containers
			if len(sc) == 0 || gid < 0 {
				continue
			}
			g, set := env(&sc[0], "QUICLAB_GROUP")
			if !set {
				r.add("%s: env QUICLAB_GROUP is not set: the shards would not share their directories with the merge's group %d, which could not read their databases", s, gid)
			} else if g != strconv.FormatInt(gid, 10) {
				r.add("%s: runs as group %d but the shards share their directories with group %q (QUICLAB_GROUP): it could not read their databases", o, gid, g)
			}
		}
		if m := envInt(r, o, c, "QUICLAB_SHARDS"); n > 0 && m >= 0 && m != n {
			r.add("%s: env QUICLAB_SHARDS is %d but the shards Job runs %d shards: the merge would wait for shards that never come or leave some out", o, m, n)
		}
		if claim := resultsClaim(r, o, job, c, claims); results != "" && claim != "" && claim != results {
			r.add("%s: reads the claim %q but the shards write to %q", o, claim, results)
		}
		for _, s := range shards {
			if sc := s.obj.(*batch.Job).Spec.Template.Spec.Containers; len(sc) > 0 && sc[0].Image != c.Image {
				r.add("%s: image %q differs from the shards' %q: merge refuses stores of another quiclab build", o, c.Image, sc[0].Image)
			}
		}
	}
}

// checkShards checks the Indexed Job of shards and returns its shard count and results claim.
func checkShards(r *report, o object, job *batch.Job, claims map[string]*core.PersistentVolumeClaim) (int, string) {
	spec := job.Spec
	n := -1
	if spec.Completions == nil {
		r.add("%s: spec.completions is not set: it is the shard count", o)
	} else {
		n = int(*spec.Completions)
	}
	if spec.Parallelism == nil || int(*spec.Parallelism) != n {
		r.add("%s: spec.parallelism must equal spec.completions (%d): every shard runs at once, one per node", o, n)
	}
	if spec.BackoffLimitPerIndex == nil {
		r.add("%s: spec.backoffLimitPerIndex is not set: a failed shard's pod would not be replaced by one that resumes it", o)
	}
	pod := spec.Template.Spec
	if pod.RestartPolicy != core.RestartPolicyNever {
		r.add("%s: spec.template.spec.restartPolicy is %q: Never is needed so that a new pod of the same index resumes the shard", o, pod.RestartPolicy)
	}
	if !onePerNode(pod.Affinity, spec.Template.Labels) {
		r.add("%s: spec.template.spec.affinity: a required pod anti-affinity on topologyKey kubernetes.io/hostname whose labelSelector matches the pod's own labels is needed: one shard per measurement host", o)
	}
	c := onlyContainer(r, o, job)
	if c == nil {
		return n, ""
	}
	if m := envInt(r, o, c, "QUICLAB_SHARDS"); n > 0 && m >= 0 && m != n {
		r.add("%s: env QUICLAB_SHARDS is %d but spec.completions is %d: shards would be missing or run twice", o, m, n)
	}
	if s := script(job); !strings.Contains(s, "quiclab run") || !strings.Contains(s, "--shard") || !strings.Contains(s, "JOB_COMPLETION_INDEX") {
		r.add("%s: the container must run `quiclab run ... --shard K/N` with K from JOB_COMPLETION_INDEX", o)
	}
	sc := c.SecurityContext
	if sc != nil && sc.Privileged != nil && *sc.Privileged {
		r.add("%s: container %s is privileged: grant only the capabilities quiclab needs (%s) and /dev/net/tun", o, c.Name, capList(shardCaps))
	}
	var caps []core.Capability
	dropsAll := false
	if sc != nil && sc.Capabilities != nil {
		caps = sc.Capabilities.Add
		dropsAll = slices.Contains(sc.Capabilities.Drop, "ALL")
	}
	for _, need := range shardCaps {
		if !slices.Contains(caps, need.name) {
			r.add("%s: container %s does not add capability %s: %s", o, c.Name, need.name, need.why)
		}
	}
	for _, got := range caps {
		if !slices.ContainsFunc(shardCaps, func(n capability) bool { return n.name == got }) {
			r.add("%s: container %s adds capability %s, which quiclab does not need (only %s)", o, c.Name, got, capList(shardCaps))
		}
	}
	if !dropsAll {
		r.add("%s: container %s does not drop ALL capabilities first: it would keep the runtime's defaults beside the ones it adds", o, c.Name)
	}
	if !mounts(c, "/dev/net/tun") {
		r.add("%s: container %s has no /dev/net/tun: quiclab's link emulator uses TUN devices", o, c.Name)
	}
	return n, resultsClaim(r, o, job, c, claims)
}

// capability is one a shard's container adds, and why quiclab needs it.
type capability struct {
	name core.Capability
	why  string
}

// shardCaps: what a shard's container adds to the capabilities it drops (ALL), and no more.
var shardCaps = []capability{
	{"SYS_ADMIN", "quiclab creates network namespaces (and remounts /proc/sys writable for their settings)"},
	{"NET_ADMIN", "quiclab creates TUN devices and veth pairs and gives them addresses"},
	{"NET_BIND_SERVICE", "the endpoints listen on port 443 inside the namespaces"},
	{"SYS_NICE", "the link emulator's forwarding threads take a real-time scheduling class"},
	{"CHOWN", "each shard's directory is shared with the merge's group (QUICLAB_GROUP)"},
}

func capList(caps []capability) string {
	var names []string
	for _, c := range caps {
		names = append(names, string(c.name))
	}
	return strings.Join(names, ", ")
}

// hardened checks what both Jobs must hold: no service account token in their pods, and images
// pinned (a version tag or a digest, not :latest or no tag: every pod must run one build).
func hardened(r *report, o object, job *batch.Job) {
	pod := job.Spec.Template.Spec
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		r.add("%s: spec.template.spec.automountServiceAccountToken is not false: quiclab's pods use no Kubernetes API and should hold no token", o)
	}
	all := append(slices.Clone(pod.InitContainers), pod.Containers...)
	for _, c := range all {
		if !pinned(c.Image) {
			r.add("%s: container %s: image %q is not pinned: name a version tag (quiclab:0.1.0) or a digest (@sha256:...), not :latest or none, so every pod runs the same build", o, c.Name, c.Image)
		}
	}
}

// pinned: the image names a digest, or a tag other than latest.
func pinned(image string) bool {
	if strings.Contains(image, "@sha256:") {
		return true
	}
	// the tag follows the last colon after the last slash (a registry's port is before it)
	name := image[strings.LastIndex(image, "/")+1:]
	i := strings.LastIndex(name, ":")
	return i >= 0 && name[i+1:] != "" && name[i+1:] != "latest"
}

// unprivileged checks the merge's container: it runs as a user other than root, gains no
// privilege, and adds no capability.
func unprivileged(r *report, o object, job *batch.Job, c *core.Container) (gid int64) {
	pod := job.Spec.Template.Spec.SecurityContext
	sc := c.SecurityContext
	var user, group *int64
	var nonRoot *bool
	if pod != nil {
		user, group, nonRoot = pod.RunAsUser, pod.RunAsGroup, pod.RunAsNonRoot
	}
	if sc != nil {
		if sc.RunAsUser != nil {
			user = sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			group = sc.RunAsGroup
		}
		if sc.RunAsNonRoot != nil {
			nonRoot = sc.RunAsNonRoot
		}
	}
	if user == nil || *user == 0 || nonRoot == nil || !*nonRoot {
		r.add("%s: container %s runs as root (or may): the merge needs no privilege; set runAsNonRoot: true and runAsUser to an ordinary user", o, c.Name)
	}
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		r.add("%s: container %s: allowPrivilegeEscalation is not false", o, c.Name)
	}
	if sc != nil && sc.Privileged != nil && *sc.Privileged {
		r.add("%s: container %s is privileged: the merge needs no privilege", o, c.Name)
	}
	if sc == nil || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
		r.add("%s: container %s: capabilities must drop ALL and add none: the merge needs none", o, c.Name)
	}
	if group == nil {
		r.add("%s: container %s sets no runAsGroup: the shards share their directories with one group (QUICLAB_GROUP), which the merge must run as", o, c.Name)
		return -1
	}
	return *group
}

// onePerNode: a required anti-affinity on the node's host name against pods with these labels.
func onePerNode(a *core.Affinity, podLabels map[string]string) bool {
	if a == nil || a.PodAntiAffinity == nil {
		return false
	}
	for _, term := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		if term.TopologyKey != "kubernetes.io/hostname" || term.LabelSelector == nil {
			continue
		}
		selector, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
		if err == nil && !selector.Empty() && selector.Matches(k8slabels.Set(podLabels)) {
			return true
		}
	}
	return false
}

func onlyContainer(r *report, o object, job *batch.Job) *core.Container {
	cs := job.Spec.Template.Spec.Containers
	if len(cs) != 1 {
		r.add("%s: %d containers: quiclab's Jobs run one", o, len(cs))
		return nil
	}
	return &cs[0]
}

// script is the container's command line as one string.
func script(job *batch.Job) string {
	var parts []string
	for _, c := range job.Spec.Template.Spec.Containers {
		parts = append(parts, c.Command...)
		parts = append(parts, c.Args...)
	}
	return strings.Join(parts, " ")
}

// env is the container's environment variable name, and whether it is set.
func env(c *core.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// envInt is the container's environment variable name as a number, or -1 (with a problem said).
func envInt(r *report, o object, c *core.Container, name string) int {
	for _, e := range c.Env {
		if e.Name == name {
			n, err := strconv.Atoi(e.Value)
			if err != nil || n < 1 {
				r.add("%s: env %s is %q: a shard count, a whole number from 1, is needed", o, name, e.Value)
				return -1
			}
			return n
		}
	}
	r.add("%s: env %s is not set", o, name)
	return -1
}

// resultsClaim is the claim mounted at /results, which must be one of the manifests' claims.
func resultsClaim(r *report, o object, job *batch.Job, c *core.Container, claims map[string]*core.PersistentVolumeClaim) string {
	for _, m := range c.VolumeMounts {
		if m.MountPath != "/results" {
			continue
		}
		for _, v := range job.Spec.Template.Spec.Volumes {
			if v.Name != m.Name {
				continue
			}
			if v.PersistentVolumeClaim == nil {
				r.add("%s: volume %s at /results is not a persistentVolumeClaim: the shards' results must outlive their pods", o, v.Name)
				return ""
			}
			name := v.PersistentVolumeClaim.ClaimName
			if _, ok := claims[name]; !ok {
				r.add("%s: volume %s claims %q, which none of the manifests defines", o, v.Name, name)
			}
			return name
		}
	}
	r.add("%s: container %s mounts no volume at /results, where the shards' stores are", o, c.Name)
	return ""
}

// mounts: the container mounts a volume at path.
func mounts(c *core.Container, path string) bool {
	for _, m := range c.VolumeMounts {
		if m.MountPath == path {
			return true
		}
	}
	for _, d := range c.VolumeDevices {
		if d.DevicePath == path {
			return true
		}
	}
	return false
}
