//! Function-pointer tables resolved from a loaded library, and the optional ones that switch one
//! feature off. A table resolves all of its symbols or none: a missing name is recorded so the
//! caller can report every missing symbol at once.

use crate::error::{Error, Result};

/// Declares a struct of `unsafe extern "C"` function pointers named after their symbols, with a
/// `resolve` that looks each one up in a `libloading::Library`.
///
/// Where each parameter is named (`fn(stream: hipStream_t) -> hipError_t`), the names and types
/// are those of the C header, and tests also get `PROTOTYPES`: every prototype as text, which the
/// HIP ABI probe compares with the real headers (`src/runtime/hip/abi.rs`).
macro_rules! symbol_table {
    ($(#[$meta:meta])* $vis:vis struct $table:ident {
        $( $sym:ident : fn($($param:ident : $arg:ty),* $(,)?) -> $ret:ty; )*
    }) => {
        $crate::runtime::symbols::symbol_table! {
            @table $(#[$meta])* $vis struct $table { $( $sym: fn($($arg),*) -> $ret; )* }
        }

        #[cfg(test)]
        impl $table {
            /// Each symbol with its return type and its named parameters, as written above.
            pub const PROTOTYPES: &[$crate::runtime::symbols::Prototype] = &[$(
                $crate::runtime::symbols::Prototype {
                    name: stringify!($sym),
                    ret: stringify!($ret),
                    params: &[$((stringify!($param), stringify!($arg))),*],
                },
            )*];
        }
    };
    ($(#[$meta:meta])* $vis:vis struct $table:ident {
        $( $sym:ident : fn($($arg:ty),* $(,)?) -> $ret:ty; )*
    }) => {
        $crate::runtime::symbols::symbol_table! {
            @table $(#[$meta])* $vis struct $table { $( $sym: fn($($arg),*) -> $ret; )* }
        }
    };
    // The table itself, for both forms above (a prototype without parameters matches both).
    (@table $(#[$meta:meta])* $vis:vis struct $table:ident {
        $( $sym:ident : fn($($arg:ty),* $(,)?) -> $ret:ty; )*
    }) => {
        $(#[$meta])*
        #[allow(non_snake_case)]
        $vis struct $table {
            $( pub $sym: unsafe extern "C" fn($($arg),*) -> $ret, )*
        }

        impl $table {
            /// Resolves every symbol, or names each one that is missing.
            ///
            /// # Safety
            /// The signatures above must match the library's, and the library must stay loaded
            /// for as long as the table is used.
            #[allow(non_snake_case)]
            pub unsafe fn resolve(lib: &libloading::Library) -> Result<Self, Vec<&'static str>> {
                let mut missing = Vec::new();
                $(
                    // SAFETY: the caller promises that the symbol has this signature; the
                    // pointer is copied out of the `Symbol` and outlives it only as long as
                    // the caller keeps the library loaded.
                    let $sym = unsafe {
                        lib.get::<unsafe extern "C" fn($($arg),*) -> $ret>(concat!(stringify!($sym), "\0").as_bytes())
                    }
                    .map(|s| *s)
                    .map_err(|_| missing.push(stringify!($sym)))
                    .ok();
                )*
                match ($($sym,)*) {
                    ($(Some($sym),)*) => Ok(Self { $( $sym, )* }),
                    _ => Err(missing),
                }
            }
        }
    };
}

pub(crate) use symbol_table;

/// A prototype of a symbol table with named parameters: Rust types as written, in the C
/// header's names (`*const hipGraphNode_t`).
#[cfg(test)]
pub struct Prototype {
    pub name: &'static str,
    pub ret: &'static str,
    pub params: &'static [(&'static str, &'static str)],
}

/// An optional table: present, or the reason its feature is off (a missing symbol, an old
/// runtime, a device without support).
pub struct Feature<T> {
    /// The name in `RuntimeInfo::disabled_features`.
    key: &'static str,
    /// The start of the `Unsupported` error ("... is unavailable").
    unavailable: &'static str,
    table: Result<T, String>,
}

impl<T> Feature<T> {
    pub fn new(key: &'static str, unavailable: &'static str, table: Result<T, String>) -> Self {
        Feature { key, unavailable, table }
    }

    /// The table, or an `Unsupported` error that says why the feature is off.
    pub fn get(&self) -> Result<&T> {
        self.table.as_ref().map_err(|r| Error::unsupported(format!("{}: {r}", self.unavailable)))
    }

    /// The table, or the bare reason, for callers that word the error themselves.
    pub fn table(&self) -> Result<&T, &str> {
        self.table.as_ref().map_err(String::as_str)
    }

    /// `key: reason` when the feature is off.
    pub fn disabled(&self) -> Option<String> {
        self.table.as_ref().err().map(|r| format!("{}: {r}", self.key))
    }
}

/// The reason for a table whose symbols `library` lacks.
pub fn missing_in(library: &str, names: Vec<&str>) -> String {
    format!("{library} lacks {}", names.join(", "))
}
