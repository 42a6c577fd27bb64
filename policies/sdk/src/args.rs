//! TODO(helper): args
