//! Linux runtime (see README).
