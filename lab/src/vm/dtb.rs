//! Properties a boot adds to the device tree QEMU generates for an aarch64 `virt` guest, for
//! what QEMU's options cannot say (the GICv3 ITS's `numa-node-id`, for one): QEMU dumps the tree
//! its machine would get (`-machine ...,dumpdtb=FILE`, the same machine, CPUs, memory and
//! nodes), every node whose `compatible` lists the property's gets it (replacing one of that
//! name), and the guest boots with the result (`-dtb`; QEMU still writes `/chosen` itself).
//!
//! The tree is read with the `fdt` crate and written whole again with rust-vmm's `vm-fdt`
//! (neither edits a tree in place), memory reservations and boot CPU kept.

use std::path::Path;
use std::process::Stdio;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// A property of `u32` cells for the nodes compatible with `compatible`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DtProperty {
    /// A `compatible` string the node lists (`arm,gic-v3-its`).
    pub compatible: String,
    /// The property's name (`numa-node-id`).
    pub name: String,
    /// Its cells, big-endian in the tree.
    pub cells: Vec<u32>,
}

impl DtProperty {
    /// `name = <value>` on the nodes compatible with `compatible`.
    pub fn u32(compatible: &str, name: &str, value: u32) -> DtProperty {
        DtProperty {
            compatible: compatible.to_string(),
            name: name.to_string(),
            cells: vec![value],
        }
    }
}

/// Writes to `out` the device tree of the machine `qemu_args` describe (machine first, as
/// `-machine M`), with `properties` added. Fails when a property matches no node.
pub(crate) fn write_patched(
    qemu: &crate::toolchain::Qemu,
    qemu_args: &[String],
    properties: &[DtProperty],
    out: &Path,
) -> Result<()> {
    let dumped = out.with_extension("qemu.dtb");
    let mut args = qemu_args.to_vec();
    let machine = args
        .iter()
        .position(|a| a == "-machine")
        .context("the QEMU arguments name no -machine")?;
    args[machine + 1] = format!("{},dumpdtb={}", args[machine + 1], dumped.display());
    let result = crate::process::output(
        qemu.command()
            .args(&args)
            .args(["-display", "none"])
            .stdin(Stdio::null()),
    )?;
    if !result.status.success() || !dumped.is_file() {
        bail!(
            "QEMU did not dump its device tree ({}): {}",
            result.status,
            String::from_utf8_lossy(&result.stderr).trim()
        );
    }
    let tree = std::fs::read(&dumped).with_context(|| format!("reading {}", dumped.display()))?;
    let patched = patch(&tree, properties)?;
    std::fs::write(out, patched).with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}

/// `tree` with `properties` set on every node compatible with theirs.
pub(crate) fn patch(tree: &[u8], properties: &[DtProperty]) -> Result<Vec<u8>> {
    let fdt = fdt::Fdt::new(tree).map_err(|e| anyhow::anyhow!("reading the device tree: {e:?}"))?;
    let reservations: Vec<vm_fdt::FdtReserveEntry> = fdt
        .memory_reservations()
        .map(|r| vm_fdt::FdtReserveEntry::new(r.address() as u64, r.size() as u64))
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut writer = vm_fdt::FdtWriter::new_with_mem_reserv(&reservations)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let boot_cpu = u32::from_be_bytes(tree[28..32].try_into().expect("4 bytes"));
    writer.set_boot_cpuid_phys(boot_cpu);
    let root = fdt
        .find_node("/")
        .context("the device tree has no root node")?;
    let mut matched = vec![0usize; properties.len()];
    copy_node(&mut writer, root, "", properties, &mut matched)?;
    if let Some(i) = matched.iter().position(|n| *n == 0) {
        bail!(
            "no node of the device tree is compatible with {:?} (for its property {})",
            properties[i].compatible,
            properties[i].name
        );
    }
    writer
        .finish()
        .map_err(|e| anyhow::anyhow!("writing the device tree: {e}"))
}

fn copy_node(
    writer: &mut vm_fdt::FdtWriter,
    node: fdt::node::FdtNode<'_, '_>,
    name: &str,
    properties: &[DtProperty],
    matched: &mut [usize],
) -> Result<()> {
    let err = |e: vm_fdt::Error| anyhow::anyhow!("writing the device tree: {e}");
    let handle = writer.begin_node(name).map_err(err)?;
    let compatible: Vec<&str> = node
        .compatible()
        .map(|c| c.all().collect())
        .unwrap_or_default();
    let added: Vec<(usize, &DtProperty)> = properties
        .iter()
        .enumerate()
        .filter(|(_, p)| compatible.contains(&p.compatible.as_str()))
        .collect();
    for p in node.properties() {
        if added.iter().any(|(_, a)| a.name == p.name) {
            continue;
        }
        writer.property(p.name, p.value).map_err(err)?;
    }
    for (i, p) in added {
        let bytes: Vec<u8> = p.cells.iter().flat_map(|c| c.to_be_bytes()).collect();
        writer.property(&p.name, &bytes).map_err(err)?;
        matched[i] += 1;
    }
    for child in node.children() {
        copy_node(writer, child, child.name, properties, matched)?;
    }
    writer.end_node(handle).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small tree as QEMU's virt has it: an interrupt controller with an ITS child.
    fn tree() -> Vec<u8> {
        let mut w =
            vm_fdt::FdtWriter::new_with_mem_reserv(&[
                vm_fdt::FdtReserveEntry::new(0x1000, 0x2000).unwrap()
            ])
            .unwrap();
        let root = w.begin_node("").unwrap();
        w.property_string("compatible", "linux,dummy-virt").unwrap();
        let intc = w.begin_node("intc@8000000").unwrap();
        w.property_string("compatible", "arm,gic-v3").unwrap();
        let its = w.begin_node("its@8080000").unwrap();
        w.property_string("compatible", "arm,gic-v3-its").unwrap();
        w.property_null("msi-controller").unwrap();
        w.property_u32("numa-node-id", 7).unwrap();
        w.end_node(its).unwrap();
        w.end_node(intc).unwrap();
        w.end_node(root).unwrap();
        w.finish().unwrap()
    }

    #[test]
    fn a_property_lands_on_the_compatible_node_and_the_rest_stays() {
        let patched = patch(
            &tree(),
            &[DtProperty::u32("arm,gic-v3-its", "numa-node-id", 1)],
        )
        .unwrap();
        let fdt = fdt::Fdt::new(&patched).unwrap();
        let its = fdt.find_compatible(&["arm,gic-v3-its"]).unwrap();
        let node = its.property("numa-node-id").unwrap();
        assert_eq!(node.as_usize(), Some(1), "replaced, not doubled");
        assert_eq!(
            its.properties()
                .filter(|p| p.name == "numa-node-id")
                .count(),
            1
        );
        assert!(its.property("msi-controller").is_some());
        assert!(fdt
            .find_compatible(&["arm,gic-v3"])
            .unwrap()
            .property("numa-node-id")
            .is_none());
        let reserved: Vec<_> = fdt
            .memory_reservations()
            .map(|r| (r.address() as u64, r.size()))
            .collect();
        assert_eq!(reserved, [(0x1000, 0x2000)]);
    }

    #[test]
    fn a_property_for_no_node_is_an_error() {
        let err = patch(&tree(), &[DtProperty::u32("arm,gic-v2m-frame", "x", 1)]).unwrap_err();
        assert!(err.to_string().contains("arm,gic-v2m-frame"), "{err}");
        assert!(patch(b"not a tree", &[]).is_err());
    }
}
