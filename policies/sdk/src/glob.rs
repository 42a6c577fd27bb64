//! TODO(helper): glob
