//! What an `idem mqtt consume` image keeps beside the receiver's own record, in the
//! image file: [`applied`], the ids it applied, which a grade reads.

pub mod applied;
