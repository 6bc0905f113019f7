//! `tallyho mutants` on the CPU: the checkout's cuda/ tree inlines to exactly the embedded
//! sources (the include rule is build.rs's own), each kind of planted fault is found and
//! applied where it says, the sample is deterministic and capped per file, every kernel a
//! fault can reach has verify groups to run, and NVRTC sorts the viable from the unviable.

mod common;

use common::tallyho;
use std::collections::BTreeSet;
use tallyho::harness::mutants::{self, candidates, generate, Kind, Mutant, Tree};
use tallyho::harness::verify;
use tallyho::runtime::KERNELS;

fn tree() -> Tree {
    Tree::read(&mutants::default_cuda_dir()).unwrap()
}

#[test]
fn the_checkout_inlines_to_the_embedded_sources() {
    // Tree::read refuses a tree that does not; check the refusal too, with one file changed.
    let t = tree();
    for k in KERNELS {
        assert_eq!(t.inlined(k.name, None).unwrap(), k.source, "{}", k.name);
    }
    let dir = common::fresh_dir("mutants-tree");
    let copy = |from: &std::path::Path, to: &std::path::Path| {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let p = e.unwrap().path();
            if p.is_file() {
                std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
            }
        }
    };
    let cuda = mutants::default_cuda_dir();
    copy(&cuda, &dir);
    copy(&cuda.join("common"), &dir.join("common"));
    Tree::read(&dir).unwrap();
    let header = dir.join("common/grid.cuh");
    let text = std::fs::read_to_string(&header).unwrap();
    std::fs::write(&header, text.replacen("__syncthreads();", "", 1)).unwrap();
    let refused = Tree::read(&dir)
        .err()
        .expect("a changed tree is refused")
        .to_string();
    assert!(
        refused.contains("is not the source this binary was built from")
            && refused.contains("rebuild"),
        "{refused}"
    );
}

#[test]
fn each_kind_of_fault_is_found_and_applied_where_it_says() {
    let text = "\
#include \"common/grid.cuh\"
// a comment: a < b && c
extern \"C\" __global__ void k(const float* __restrict__ x, float* y, unsigned int n) {
    for (unsigned int i = threadIdx.x; i < n; i += blockDim.x) {
        y[i] = x[i] * 0.5f + 2; /* y = a - b */
    }
    __syncthreads();
    float v = __shfl_down_sync(0xffffffffu, y[0], 16);
    if (n == 3 && v >= 1.0f) y[0] = -v;
}
";
    let found = candidates("k.cu", text);
    let kinds: BTreeSet<Kind> = found.iter().map(|m| m.kind).collect();
    assert_eq!(
        kinds,
        BTreeSet::from([
            Kind::Barrier,
            Kind::Reduction,
            Kind::Index,
            Kind::Bound,
            Kind::Operator,
            Kind::Constant
        ]),
        "{found:#?}"
    );
    let has = |line: usize, from: &str, to: &str| {
        assert!(
            found
                .iter()
                .any(|m| m.line == line && m.from == from && m.to == to),
            "no {from} -> {to} on line {line}: {found:#?}"
        )
    };
    has(4, "threadIdx.x", "(threadIdx.x + 1)");
    has(4, "<", "<=");
    has(4, "+=", "-=");
    has(5, "*", "/");
    has(5, "0.5f", "1.0f");
    has(5, "2", "3");
    has(5, "[", "[1 + ");
    has(7, "__syncthreads();", "");
    has(8, "__shfl_down_sync", "__shfl_xor_sync");
    has(9, "==", "!=");
    has(9, "&&", "||");
    has(9, ">=", ">");
    // Not the comments, the include, the pointer declarators, nor the unary minus.
    for m in &found {
        assert!(m.line > 2, "a fault in a comment or an include: {m:?}");
        assert!(
            !(m.line == 3 && m.from == "*"),
            "a pointer declarator: {m:?}"
        );
        assert!(!(m.line == 5 && m.from == "-"), "inside a comment: {m:?}");
        assert!(!(m.line == 9 && m.from == "-"), "a unary minus: {m:?}");
    }
}

#[test]
fn a_fault_changes_its_token_only_and_reaches_every_kernel_including_its_file() {
    let t = tree();
    let grid =
        std::fs::read_to_string(mutants::default_cuda_dir().join("common/grid.cuh")).unwrap();
    let m = candidates("common/grid.cuh", &grid)
        .into_iter()
        .find(|m| m.kind == Kind::Barrier)
        .expect("grid.cuh holds a barrier");
    let reached = mutants::mutated_sources(&t, &m).unwrap();
    assert!(
        reached.len() >= 3,
        "grid.cuh is included by several kernels: {}",
        reached.len()
    );
    for (kernel, mutated) in &reached {
        let original = KERNELS.iter().find(|k| k.name == *kernel).unwrap().source;
        assert_eq!(
            original.len() - mutated.len(),
            m.from.len(),
            "{kernel}: only `{}` removed",
            m.from
        );
        assert_ne!(original, mutated.as_str());
    }
    // A fault whose text is not where it says is refused, naming the place.
    let stale = Mutant {
        from: "__syncwarp();".into(),
        ..m.clone()
    };
    let e = mutants::mutated_sources(&t, &stale)
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not read") && e.contains("grid.cuh"), "{e}");
}

#[test]
fn the_sample_is_deterministic_capped_per_file_and_spans_the_kinds() {
    let t = tree();
    let (a, b) = (generate(&t, 8, 1), generate(&t, 8, 1));
    assert_eq!(a, b);
    assert_ne!(a, generate(&t, 8, 2), "another seed, another sample");
    let mut per_file = std::collections::BTreeMap::<&str, usize>::new();
    for m in &a {
        *per_file.entry(m.file.as_str()).or_default() += 1;
    }
    assert!(per_file.values().all(|&n| n <= 8), "{per_file:?}");
    assert!(
        per_file.len() >= 30,
        "most files hold faults: {}",
        per_file.len()
    );
    let kinds: BTreeSet<Kind> = a.iter().map(|m| m.kind).collect();
    assert_eq!(kinds.len(), 6, "every kind of fault is planted: {kinds:?}");
}

#[test]
fn every_kernel_a_fault_can_reach_has_verify_groups_to_run() {
    let t = tree();
    for m in generate(&t, 2, 1) {
        let groups = mutants::groups_for(&t, &m);
        assert!(!groups.is_empty(), "{}", m.describe());
        let selected = verify::select(&groups).unwrap();
        assert!(!selected.is_empty(), "{}: no group", m.describe());
    }
    for k in KERNELS {
        assert!(
            verify::GROUPS.iter().any(|g| g.covers().contains(&k.name)),
            "no verify group checks {}",
            k.name
        );
    }
}

#[test]
fn compile_only_sorts_a_files_faults_with_nvrtc_and_shards_split_the_list() {
    let (ok, stdout, stderr) = tallyho(&[
        "mutants",
        "--compile-only",
        "--file",
        "replay_gather.cu",
        "--per-file",
        "4",
    ]);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("mutants compile for sm_90"), "{stdout}");
    let list = |args: &[&str]| -> Vec<String> {
        let (ok, stdout, stderr) = tallyho(&[&["mutants", "--list"], args].concat());
        assert!(ok, "{stderr}");
        stdout
            .lines()
            .filter(|l| l.starts_with("cuda/"))
            .map(String::from)
            .collect()
    };
    let whole = list(&[]);
    let mut halves = [list(&["--shard", "0/2"]), list(&["--shard", "1/2"])].concat();
    halves.sort();
    let mut sorted = whole.clone();
    sorted.sort();
    assert_eq!(halves, sorted, "the shards' union is the whole list");
    let (ok, _, stderr) = tallyho(&["mutants", "--list", "--file", "no_such.cu"]);
    assert!(
        !ok && stderr.contains("--file \"no_such.cu\" matches no file"),
        "{stderr}"
    );
}
