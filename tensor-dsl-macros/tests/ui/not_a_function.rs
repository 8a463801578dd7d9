use tensor_dsl::tensor_kernel;

#[tensor_kernel]
struct Matmul;

fn main() {}
