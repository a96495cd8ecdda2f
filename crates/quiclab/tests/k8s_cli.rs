//! The Kubernetes deployment (`deploy/k8s`) validated offline by `quiclab-k8s-check`
//! (`deploy/k8s/check`, built by `.ci/setup`): strict decoding and Kubernetes' own create-time
//! defaulting and validation of every object, then the agreement quiclab needs between the shard
//! Job, the merge Job and the results volume. The manifests as shipped pass; each mistake a user
//! could make in them is refused with a line naming the object and the field. Fails (never
//! skips) when the checker is not installed.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/k8s")
}

fn checker() -> PathBuf {
    quiclab_external::def::locate_program("quiclab-k8s-check").unwrap_or_else(|| {
        panic!(
            "quiclab-k8s-check is not installed: build it with .ci/setup \
             (cd deploy/k8s/check && go build -o /usr/local/bin/quiclab-k8s-check .)"
        )
    })
}

/// Runs the checker on the kustomization in `dir` and its merge Job: exit code and output.
fn check(dir: &Path) -> (i32, String) {
    let out = Command::new(checker())
        .arg(dir)
        .arg(dir.join("merge-job.yaml"))
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn shipped_manifests_are_valid_and_agree() {
    let (code, out) = check(&deploy());
    assert_eq!(code, 0, "{out}");
    for object in [
        "PersistentVolumeClaim quiclab-results: valid",
        "Job quiclab-shards: valid",
        "Job quiclab-merge: valid",
        "3 objects valid, and they agree",
    ] {
        assert!(out.contains(object), "{object:?} missing from:\n{out}");
    }
}

#[test]
fn each_mistake_is_refused_naming_its_field() {
    // (file, text replaced, replacement, what the refusal must say)
    let mistakes = [
        // a misspelt field is not silently dropped
        (
            "shards-job.yaml",
            "completionMode: Indexed",
            "completionsMode: Indexed",
            r#"unknown field "spec.completionsMode""#,
        ),
        // Kubernetes' own validation
        (
            "shards-job.yaml",
            "parallelism: 4",
            "parallelism: -1",
            "spec.parallelism: Invalid value: -1",
        ),
        (
            "shards-job.yaml",
            "restartPolicy: Never",
            "restartPolicy: Always",
            "spec.template.spec.restartPolicy: Required value",
        ),
        (
            "pvc.yaml",
            "storage: 20Gi",
            "storage: twenty",
            "quantities must match the regular expression",
        ),
        // quiclab's agreements
        (
            "shards-job.yaml",
            "value: \"4\"",
            "value: \"3\"",
            "env QUICLAB_SHARDS is 3 but spec.completions is 4",
        ),
        (
            "merge-job.yaml",
            "value: \"4\"",
            "value: \"5\"",
            "env QUICLAB_SHARDS is 5 but the shards Job runs 4 shards",
        ),
        (
            "shards-job.yaml",
            "topologyKey: kubernetes.io/hostname",
            "topologyKey: topology.kubernetes.io/zone",
            "a required pod anti-affinity on topologyKey kubernetes.io/hostname",
        ),
        // only the capabilities quiclab needs, not a privileged container
        (
            "shards-job.yaml",
            r#"add: ["SYS_ADMIN", "NET_ADMIN", "#,
            r#"add: ["NET_ADMIN", "#,
            "does not add capability SYS_ADMIN",
        ),
        (
            "shards-job.yaml",
            "            capabilities:\n",
            "            privileged: true\n            capabilities:\n",
            "is privileged: grant only the capabilities",
        ),
        (
            "shards-job.yaml",
            r#""SYS_NICE", "CHOWN"]"#,
            r#""SYS_NICE", "CHOWN", "SYS_PTRACE"]"#,
            "adds capability SYS_PTRACE, which quiclab does not need",
        ),
        (
            "shards-job.yaml",
            r#"drop: ["ALL"]"#,
            r#"drop: ["NET_RAW"]"#,
            "does not drop ALL capabilities first",
        ),
        (
            "shards-job.yaml",
            "mountPath: /dev/net/tun",
            "mountPath: /dev/tun",
            "has no /dev/net/tun",
        ),
        // no service account token, pinned images
        (
            "shards-job.yaml",
            "automountServiceAccountToken: false",
            "automountServiceAccountToken: true",
            "automountServiceAccountToken is not false",
        ),
        (
            "merge-job.yaml",
            "      automountServiceAccountToken: false\n",
            "",
            "automountServiceAccountToken is not false",
        ),
        (
            "shards-job.yaml",
            "image: quiclab:0.1.0",
            "image: quiclab:latest",
            r#"image "quiclab:latest" is not pinned"#,
        ),
        (
            "merge-job.yaml",
            "image: quiclab:0.1.0",
            "image: registry.example:5000/quiclab",
            "is not pinned",
        ),
        // the merge runs as an ordinary user of the shards' group
        (
            "merge-job.yaml",
            "runAsUser: 65532",
            "runAsUser: 0",
            "runs as root (or may)",
        ),
        (
            "merge-job.yaml",
            "runAsNonRoot: true",
            "runAsNonRoot: false",
            "runs as root (or may)",
        ),
        (
            "merge-job.yaml",
            "runAsGroup: 65532",
            "runAsGroup: 100",
            "runs as group 100 but the shards share their directories with group \"65532\"",
        ),
        (
            "merge-job.yaml",
            "allowPrivilegeEscalation: false\n            capabilities:\n              drop: [\"ALL\"]\n            seccompProfile",
            "allowPrivilegeEscalation: true\n            capabilities:\n              drop: [\"ALL\"]\n            seccompProfile",
            "allowPrivilegeEscalation is not false",
        ),
        (
            "pvc.yaml",
            r#"accessModes: ["ReadWriteMany"]"#,
            r#"accessModes: ["ReadWriteOnce"]"#,
            "ReadWriteMany is needed",
        ),
        (
            "merge-job.yaml",
            "claimName: quiclab-results",
            "claimName: results",
            r#"reads the claim "results" but the shards write to "quiclab-results""#,
        ),
        (
            "merge-job.yaml",
            "        - name: quiclab\n          image: quiclab:0.1.0",
            "        - name: quiclab\n          image: quiclab:0.0.9",
            "differs from the shards'",
        ),
    ];
    let tmp = common::TempDir::new("k8s");
    for (i, (file, from, to, says)) in mistakes.iter().enumerate() {
        let dir = tmp.join(format!("case-{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        for name in [
            "kustomization.yaml",
            "pvc.yaml",
            "shards-job.yaml",
            "merge-job.yaml",
        ] {
            let text = std::fs::read_to_string(deploy().join(name)).unwrap();
            let text = if name == *file {
                assert!(text.contains(from), "{name} no longer has {from:?}");
                text.replacen(from, to, 1)
            } else {
                text
            };
            std::fs::write(dir.join(name), text).unwrap();
        }
        let (code, out) = check(&dir);
        assert_eq!(
            code, 1,
            "{file}: {from:?} -> {to:?} was not refused:\n{out}"
        );
        assert!(
            out.contains(says),
            "{file}: {from:?} -> {to:?}: the refusal does not say {says:?}:\n{out}"
        );
    }
}

/// The value of the first line of `file` (in deploy/k8s) that starts, trimmed, with `key`.
fn manifest_value(file: &str, key: &str) -> String {
    let text = std::fs::read_to_string(deploy().join(file)).unwrap();
    text.lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("{file} has no line {key:?}"))
        .trim()
        .to_string()
}

const TWO_SHARDS: &str = "name = \"k8s\"\niterations = 2\n[workload]\nkind = \"single-object\"\n\
    sizes = [\"20KB\"]\n[network]\ndelay = \"5ms\"\n[arms.h2]\nhttp = \"2\"\n[arms.h3]\nhttp = \"3\"\n";

/// A shard pod as the manifest makes it, on this machine: /proc/sys read-only (as a container
/// runtime mounts it), root holding only the capabilities the shard Job adds, and the Job's
/// script's remount first. Every stack the pods run (kernel TCP, quinn, ngtcp2, quiche, quic-go)
/// finishes its trial: the capabilities the manifest grants are enough.
#[test]
fn a_shard_pods_capabilities_are_enough_for_every_stack() {
    common::assert_root();
    let add = manifest_value("shards-job.yaml", "add: ");
    let caps: Vec<String> = add
        .trim_matches(|c| c == '[' || c == ']')
        .split(',')
        .map(|c| format!("+{}", c.trim().trim_matches('"').to_lowercase()))
        .collect();
    assert!(caps.len() >= 4, "{add}");
    let remount = manifest_value("shards-job.yaml", "mount -o remount");
    let dir = common::TempDir::new("k8s-caps");
    let plan = dir.join("plan.toml");
    std::fs::write(
        &plan,
        "name = \"caps\"\niterations = 1\n[workload]\nkind = \"single-object\"\n\
         sizes = [\"50KB\"]\n[network]\ndelay = \"5ms\"\nrate = \"20mbit\"\n\
         [arms.tcp]\nhttp = \"2\"\ntcp-cc = \"cubic\"\n[arms.quinn]\nhttp = \"3\"\n\
         [arms.ngtcp2]\nserver-stack = \"ngtcp2\"\nclient-stack = \"ngtcp2\"\nhttp = \"3\"\n\
         [arms.quiche]\nserver-stack = \"quiche\"\nhttp = \"3\"\n\
         [arms.quic-go]\nserver-stack = \"quic-go\"\nhttp = \"3\"\n",
    )
    .unwrap();
    let out = dir.join("out");
    let pod = format!(
        "mount --make-rprivate / && mount --bind /proc/sys /proc/sys && \
         mount -o remount,bind,ro /proc/sys && \
         ! sh -c 'echo 0 > /proc/sys/net/ipv4/tcp_fastopen' 2>/dev/null && \
         exec setpriv --bounding-set=-all,{caps} -- sh -c \
         'mount -o remount{remount} && exec \"$0\" run \"$1\" --jobs 1 --out \"$2\"' {bin} {plan} {out}",
        caps = caps.join(","),
        remount = remount.trim_start_matches("-o remount"),
        bin = env!("CARGO_BIN_EXE_quiclab"),
        plan = plan.display(),
        out = out.display(),
    );
    let o = Command::new("unshare")
        .args(["--mount", "--", "sh", "-c", &pod])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{pod}\n{err}");
    assert!(err.contains("5 trials ran (0 failed)"), "{err}");
}

/// The merge Job's container as the manifest makes it: an ordinary user (runAsUser and
/// runAsGroup of merge-job.yaml, no other group) merges shards that root ran with the shard
/// Job's QUICLAB_GROUP, into a directory made for it as the init container makes it.
#[test]
fn the_merge_runs_as_the_manifests_user_on_shards_root_ran() {
    common::assert_root();
    let uid = manifest_value("merge-job.yaml", "runAsUser:");
    let gid = manifest_value("merge-job.yaml", "runAsGroup:");
    // the group the shards share with, as the shard Job's environment says
    let text = std::fs::read_to_string(deploy().join("shards-job.yaml")).unwrap();
    let mut lines = text.lines().map(str::trim);
    lines.find(|l| *l == "- name: QUICLAB_GROUP").unwrap();
    let shared = lines
        .next()
        .unwrap()
        .trim_start_matches("value:")
        .trim()
        .trim_matches('"');
    let dir = common::TempDir::new("k8s-merge");
    // the volume's root: root's, others may pass
    std::fs::set_permissions(&*dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let plan = dir.join("plan.toml");
    std::fs::write(&plan, TWO_SHARDS).unwrap();
    let mut shards = Vec::new();
    for k in 1..=2 {
        let out = dir.join(format!("shard-{k}-of-2"));
        let o = common::quiclab()
            .env("QUICLAB_GROUP", shared)
            .args([
                "run",
                plan.to_str().unwrap(),
                "--shard",
                &format!("{k}/2"),
                "--out",
            ])
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        shards.push(out);
    }
    let merged = dir.join("merged");
    std::fs::create_dir(&merged).unwrap();
    std::os::unix::fs::chown(&merged, uid.parse().ok(), gid.parse().ok()).unwrap();
    let o = Command::new("setpriv")
        .args(["--reuid", &uid, "--regid", &gid, "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_quiclab"))
        .arg("merge")
        .arg(&merged)
        .args(&shards)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{said}\n{err}");
    assert!(said.contains("4 of plan k8s's 4 trials merged"), "{said}");
    let report = std::fs::metadata(merged.join("report.html")).unwrap();
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&report).to_string(),
        uid
    );
}
