use tensor_dsl::{tensor_kernel, Tensor};

struct Model;

impl Model {
    #[tensor_kernel]
    fn k(&self, a: &Tensor<f32>, c: &mut Tensor<f32>) {
        c[[i]] = a[[i]];
    }
}

fn main() {
    let _ = Model;
}
