//! TODO(helper): path
