//! Kernels as recipes: a pinned source, ordered patches and config fragments
//! (`images/kernels/*.toml`), built into the content-addressed cache, plus variants that change
//! only boot-time settings.
//!
//! - [`recipe`]: the recipe format and its validation (errors name the file and field).
//! - [`build`](mod@build): cold and incremental builds, the cache entry layout, `list`, `gc`.
//! - [`boot`]: the kernel a VM boots ([`BootKernel`]), resolved from a recipe or `debian`, and
//!   its boot-time settings applied in the guest.
//!
//! A recipe with `base = "v6.12"` and one more patch is built from the base's cached object tree:
//! only what the patch and the release suffix touch is recompiled.

pub mod boot;
pub mod build;
pub mod config;
pub mod patch;
pub mod recipe;
pub mod source;
#[cfg(test)]
mod tests;
pub mod tools;

pub use boot::{apply_script, default_kernel, prepare, resolve, BootKernel, ReadyKernel, DEBIAN};
pub use build::{
    build, build_all, build_recipe, cache_key, cached, current_keys, gc, gc_unused, list,
    list_table, local_version, toolchain_id, BuildOptions, BuiltKernel, CachedKernel, GcOptions,
    GcReport, Manifest, KIND,
};
pub use config::ConfigMismatch;
pub use patch::PatchError;
pub use recipe::{load as load_recipe, recipe_names, BootSettings, Recipe, RecipeDirs, Source};
pub use source::ResolvedSource;

/// The lab's default kernel recipe.
pub const DEFAULT_RECIPE: &str = "v6.12";
