//! Kernels as recipes: a pinned source, ordered patches and config fragments
//! (`images/kernels/*.toml`), built into the content-addressed cache, plus variants that change
//! only boot-time settings.
//!
//! - `recipe`: the recipe format and its validation (errors name the file and field).
//! - `build`: cold and incremental builds, the cache entry layout; `tree`: a variant's tree
//!   made from its base's; `key`: a build's identity; `entries`: the built kernels as a whole
//!   (`list`, `keys`, `gc`).
//! - `boot`: the kernel a VM boots ([`BootKernel`]), resolved from a recipe or `debian`, and
//!   its boot-time settings applied in the guest.
//!
//! A recipe with `base = "v6.12"` and one more patch is built from the base's cached object tree:
//! only what the patch and the release suffix touch is recompiled.
//!
//! Public: the kernel a boot takes ([`BootKernel`], [`ReadyKernel`] from [`crate::Lab::prepare`],
//! [`BootSettings`]), the `lab kernel` verbs ([`build_all`], [`list_table`], [`gc_unused`] with
//! [`BuildOptions`]) and [`unmet_needs`], which checks a kernel config of one's own against what
//! the lab reads in a guest.

pub(crate) mod boot;
pub(crate) mod build;
pub(crate) mod config;
pub(crate) mod entries;
pub(crate) mod key;
pub(crate) mod patch;
pub(crate) mod recipe;
pub(crate) mod source;
#[cfg(test)]
mod tests;
pub(crate) mod tools;
pub(crate) mod tree;

pub(crate) use boot::{apply_script, arch_of, check_arch, default_kernel, prepare, DEBIAN};
pub use boot::{BootKernel, ReadyKernel};
pub(crate) use build::{build, cached, KIND};
pub use build::{build_all, BuildOptions, BuiltKernel};
pub(crate) use entries::{current_keys, list, CachedKernel};
pub use entries::{gc_unused, keys_table, list_table, GcReport, GcRequest};
pub(crate) use key::PINNED_TOOLCHAIN_ENV;
pub use recipe::BootSettings;
pub(crate) use recipe::{load as load_recipe, recipe_names, Recipe, RecipeDirs, Source};

/// The lab's default kernel recipe (x86_64 guests).
pub const DEFAULT_RECIPE: &str = "v6.12";

/// The default kernel recipe of `arch`'s guests.
pub fn default_recipe(arch: crate::arch::Arch) -> &'static str {
    match arch {
        crate::arch::Arch::X86_64 => DEFAULT_RECIPE,
        crate::arch::Arch::Aarch64 => "v6.12-arm64",
    }
}

/// What the lab reads in a guest (the agent's mounts, cgroups, tracefs, IRQ affinity files,
/// ...) that the kernel config `dot_config` lacks: the text of a `.config` or of a guest's
/// `/proc/config.gz`, a line per symbol not at the value the lab needs, naming who needs it.
/// Empty for a kernel that serves the whole lab; a recipe of one's own is checked with it.
pub fn unmet_needs(dot_config: &str) -> Vec<String> {
    config::unmet_needs(&config::parse_dot_config(dot_config))
        .into_iter()
        .map(|(who, symbol, wanted, got)| format!("{symbol} is {got}, but {who} needs ={wanted}"))
        .collect()
}
