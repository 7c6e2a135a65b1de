/* A random MLP speculator in the real checkpoint format (config.json and
 * model.safetensors as vLLM loads them), written by the tests that need one:
 * test_spec_mlp (on the CPU) and test_cuda (its stages on the GPU). */
#ifndef INFERD_TESTS_MLP_FIX_H
#define INFERD_TESTS_MLP_FIX_H

/* A speculator for vocab V, hidden D, inner width I and n_predict stages in
 * dir (made if absent), with scale_input. Tied: emb/head/ln 0, proj 0 and 1
 * (tie_weights); untied: one of each per stage. head_sd is the head
 * weights' standard deviation (larger: sharper proposals); seed picks the
 * weights. Fails the calling test on an I/O error. */
void mlp_fix_write(const char *dir, int V, int D, int I, int n_predict, int tied, float head_sd,
                   unsigned seed);

/* A standard normal draw (the sum of 12 uniforms) from the LCG state s: the
 * fixture's weights come from it, and tests draw hidden states with it. */
float mlp_fix_gauss(unsigned *s);

#endif
