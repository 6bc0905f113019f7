//! Every kernel in cuda/ compiles with NVRTC for sm_90 (H100/H200): needs libnvrtc, no GPU.

#[test]
fn every_kernel_compiles_with_nvrtc_for_sm90() {
    let compiled = tallyho::runtime::compile_all("sm_90").unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<&str> = tallyho::runtime::KERNELS.iter().map(|k| k.name).collect();
    assert_eq!(compiled, names);
    assert!(
        names.contains(&"replay_sample"),
        "kernel table is missing replay_sample: {names:?}"
    );
}

#[test]
fn kernel_table_lists_every_entry_point_with_a_source_hash() {
    for k in tallyho::runtime::KERNELS {
        assert!(!k.entry_points.is_empty(), "{} has no entry point", k.name);
        assert_eq!(k.sha256.len(), 64, "{}", k.name);
        assert!(
            !k.source.contains("#include \"common/"),
            "{}: project headers must be inlined",
            k.name
        );
    }
}
