"""The dflash_tune package on the CPU (no GPU): it imports, its operators and their schemas register and pass
torch.library.opcheck on meta tensors (schema, fake implementation, autograd registration, AOT dispatch), a missing
key raises MissingKernelError with the exact warmup command, and bad inputs raise one-line errors."""
import os
import shlex
import subprocess
import sys
import tempfile
import unittest

_CACHE = tempfile.mkdtemp(prefix="dflash_tune_test_cache_")
os.environ["DFLASH_CACHE_DIR"] = _CACHE  # before the first use opens the cache

import torch  # noqa: E402

import dflash_tune  # noqa: E402
from dflash_tune import ops  # noqa: E402

OPS = torch.ops.dflash_tune
ATTENTION_SHAPE = dict(ctx_len=256, num_blocks=4, block_size=16, window=0, heads_q=4, heads_kv=2, head_dim=128)


def attention_inputs(device="meta", batch=2):
    bs, n, ctx, hq, hkv, d = 16, 4, 256, 4, 2, 128
    q = torch.randn(batch, n * bs, hq, d, dtype=torch.bfloat16, device=device)
    k = torch.randn(batch, ctx + n * bs, hkv, d, dtype=torch.bfloat16, device=device)
    v = torch.randn_like(k)
    anchors = torch.tensor([[16, 64, 100, 200]] * batch, dtype=torch.int32, device=device)
    valid = torch.ones(batch, n, dtype=torch.bool, device=device)
    return q, k, v, anchors, valid


class PackageTest(unittest.TestCase):
    def test_imports_and_uses_the_environments_cache_dir(self):
        self.assertEqual(dflash_tune.cache_dir(), _CACHE)
        self.assertTrue(dflash_tune.binary().is_file())

    def test_cli_runs_the_packaged_dflash_tune(self):
        for command in ([sys.executable, "-m", "dflash_tune", "--help"],
                        [os.path.join(os.path.dirname(sys.executable), "dflash-tune"), "families"]):
            r = subprocess.run(command, capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
        r = subprocess.run([sys.executable, "-m", "dflash_tune", "families"], capture_output=True, text=True)
        self.assertIn("attention_bwd", r.stdout)

    def test_operators_register_with_their_schemas(self):
        for name in ("attention_fwd", "attention_bwd", "causal_conv1d_silu", "gated_delta_rule", "kernel_problems",
                     "missing_kernels", "cache_dir"):
            self.assertTrue(hasattr(OPS, name), name)
        schema = str(OPS.attention_fwd.default._schema)
        self.assertIn("Tensor? doc_start", schema)
        self.assertIn("-> (Tensor, Tensor)", schema)

    def test_opcheck_attention_on_meta_tensors(self):
        q, k, v, anchors, valid = attention_inputs()
        q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
        args = (q, k, v, anchors, valid, None, 256, 16, 0, 128 ** -0.5, False)
        torch.library.opcheck(OPS.attention_fwd.default, args)

    def test_fake_outputs_have_the_cuda_implementations_shapes(self):
        q, k, v, anchors, valid = attention_inputs()
        o, lse = OPS.attention_fwd(q, k, v, anchors, valid, None, 256, 16, 0, 0.1, False)
        self.assertEqual(o.shape, q.shape)
        self.assertEqual(lse.shape, (2, 4, 64))
        self.assertEqual(lse.dtype, torch.float32)
        x = torch.empty(1, 96, 40, dtype=torch.bfloat16, device="meta")
        y = OPS.causal_conv1d_silu(x, torch.empty(96, 4, dtype=torch.bfloat16, device="meta"), None, False)
        self.assertEqual((y.shape, y.stride()), ((1, 96, 40), (96 * 40, 1, 96)))

    def test_opcheck_conv_and_gated_delta_rule_on_meta_tensors(self):
        x = torch.randn(1, 40, 96, dtype=torch.bfloat16, device="meta").transpose(1, 2)
        w = torch.randn(96, 4, dtype=torch.bfloat16, device="meta")
        torch.library.opcheck(OPS.causal_conv1d_silu.default, (x, w, None, False))
        q = torch.randn(1, 64, 2, 128, dtype=torch.bfloat16, device="meta")
        v = torch.randn(1, 64, 4, 128, dtype=torch.bfloat16, device="meta")
        a = torch.randn(1, 64, 4, dtype=torch.bfloat16, device="meta")
        h = torch.randn(4, dtype=torch.float32, device="meta")
        # Raw gates, no states; precomputed gates (fp32 g, beta) with initial and final states, q and k as given.
        torch.library.opcheck(OPS.gated_delta_rule.default, (q, q.clone(), v, a, a.clone(), h, h.clone(), None, None,
                                                             None, None, 0.0, True, False, False))
        g = torch.randn(1, 64, 4, dtype=torch.float32, device="meta")
        h0 = torch.randn(3, 4, 128, 128, dtype=torch.float32, device="meta")
        cu = torch.tensor([0, 10, 20, 64], dtype=torch.int32, device="meta")
        torch.library.opcheck(OPS.gated_delta_rule.default, (q, q.clone(), v, None, None, None, None, g, g.clone(),
                                                             h0, cu, 0.1, False, True, False))

    def test_fake_gated_delta_rule_outputs_have_the_cuda_implementations_shapes(self):
        q = torch.empty(2, 64, 2, 128, dtype=torch.bfloat16, device="meta")
        v = torch.empty(2, 64, 6, 128, dtype=torch.bfloat16, device="meta")
        g = torch.empty(2, 64, 6, dtype=torch.float32, device="meta")
        o, ht = OPS.gated_delta_rule(q, q, v, None, None, None, None, g, g, None, None, 0.0, False, True, False)
        self.assertEqual((o.shape, o.dtype), (v.shape, torch.bfloat16))
        self.assertEqual((ht.shape, ht.dtype), ((2, 6, 128, 128), torch.float32))
        _, none = OPS.gated_delta_rule(q, q, v, None, None, None, None, g, g, None, None, 0.0, False, False, False)
        self.assertEqual(none.shape, (0,))

    def test_missing_key_raises_with_the_exact_warmup_command(self):
        with self.assertRaises(dflash_tune.MissingKernelError) as caught:
            dflash_tune.require("dflash_attention", arch="sm_120", **ATTENTION_SHAPE)
        e = caught.exception
        self.assertEqual(len(e.commands), 2)  # attention_fwd and attention_bwd
        self.assertIn("dflash-tune warmup", str(e))
        problems = dflash_tune.kernel_problems("dflash_attention", **ATTENTION_SHAPE)
        for command, problem in zip(e.commands, problems):
            argv = shlex.split(command)
            self.assertEqual(argv[:4], ["dflash-tune", "warmup", "--arch", "sm_120"])
            self.assertEqual(argv[argv.index("--cache-dir") + 1], _CACHE)
            self.assertEqual(argv[argv.index("--problem") + 1], problem)
        self.assertRegex(e.key, r"^[0-9a-f]{12}$")
        self.assertEqual(dflash_tune.missing_kernels("causal_conv1d", arch="sm_90", tokens=64, channels=96)[0][:6],
                         "conv1d")

    def test_the_printed_command_runs_with_the_packaged_binary(self):
        missing = dflash_tune.missing_kernels("causal_conv1d", arch="sm_90", tokens=64, channels=96)
        argv = shlex.split(missing[0].split("fill it with: ", 1)[1])
        self.assertEqual(argv[0], "dflash-tune")
        # Exactly that command, with --compile-only (no GPU here): it compiles the key's variants (~40 s on 2 cores)
        # and names the key's bucketed problem; a compile-only run publishes no winner, so the key stays missing.
        r = subprocess.run([str(dflash_tune.binary())] + argv[1:] + ["--compile-only", "--json"], capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn('"compiled"', r.stdout)
        self.assertIn("conv1d", r.stdout)
        self.assertEqual(len(dflash_tune.missing_kernels("causal_conv1d", arch="sm_90", tokens=64, channels=96)), 1)

    def test_a_device_tunes_the_arch_its_operators_load(self):
        # The arch warmup / require / missing_kernels default to is the one the operators look their keys up for:
        # the arch-specific target on Hopper (its wgmma tier), the plain one elsewhere.
        arch = torch.ops.dflash_tune.device_arch
        self.assertEqual([arch(90), arch(120), arch(89), arch(80)], ["sm_90a", "sm_120", "sm_89", "sm_80"])

    def test_unknown_operation_and_dims_are_clear_errors(self):
        with self.assertRaisesRegex(ValueError, "unknown operation 'flex'"):
            dflash_tune.kernel_problems("flex", tokens=1)
        with self.assertRaisesRegex(TypeError, "needs channels="):
            dflash_tune.kernel_problems("causal_conv1d", tokens=64)
        with self.assertRaisesRegex(RuntimeError, "arch must look like sm_90"):
            dflash_tune.missing_kernels("causal_conv1d", arch="hopper", tokens=64, channels=96)

    def test_wrong_dtype_shape_and_device_are_one_line_errors(self):
        q, k, v, anchors, valid = attention_inputs(device="cpu")
        gdn_qkv = (torch.zeros(1, 4, 1, 128, dtype=torch.bfloat16), torch.zeros(1, 4, 1, 128, dtype=torch.bfloat16),
                   torch.zeros(1, 4, 2, 128, dtype=torch.bfloat16))
        fla_gates = (torch.zeros(1, 4, 2), torch.zeros(1, 4, 2))
        cases = [
            (TypeError, "q must be torch.bfloat16, got torch.float32",
             lambda: ops.dflash_attention(q.float(), k, v, anchors, ctx_len=256)),
            (ValueError, "k must have 4 dims",
             lambda: ops.dflash_attention(q, k[0], v, anchors, ctx_len=256)),
            (ValueError, "must have ctx_len \\+ N\\*block_size = 192 rows, got 320",
             lambda: ops.dflash_attention(q, k, v, anchors, ctx_len=128)),
            (ValueError, "anchors must be shaped \\(2, 4\\)",
             lambda: ops.dflash_attention(q, k, v, anchors[:, :2], ctx_len=256)),
            (ValueError, "q must be on a CUDA device, got cpu",
             lambda: ops.dflash_attention(q, k, v, anchors, valid, ctx_len=256)),
            (ValueError, "layout must be 'bshd' or 'bhsd'",
             lambda: ops.dflash_attention(q, k, v, anchors, ctx_len=256, layout="sbhd")),
            (ValueError, "activation must be 'silu'",
             lambda: ops.causal_conv1d(torch.zeros(1, 8, 4, dtype=torch.bfloat16),
                                       torch.zeros(8, 4, dtype=torch.bfloat16), activation=None)),
            (ValueError, "weight must be \\[C, 4\\]",
             lambda: ops.causal_conv1d(torch.zeros(1, 8, 4, dtype=torch.bfloat16),
                                       torch.zeros(8, 3, dtype=torch.bfloat16))),
            (TypeError, "A_log must be torch.float32",
             lambda: ops.gated_delta_rule(*[torch.zeros(1, 4, 1, 128, dtype=torch.bfloat16)] * 3,
                                          *[torch.zeros(1, 4, 1, dtype=torch.bfloat16)] * 2,
                                          torch.zeros(1, dtype=torch.bfloat16), torch.zeros(1))),
            (TypeError, "unexpected keyword arguments \\['bogus'\\]",
             lambda: ops.chunk_gated_delta_rule(*gdn_qkv, *fla_gates, bogus=1)),
            (NotImplementedError, "cp_context",
             lambda: ops.chunk_gated_delta_rule(*gdn_qkv, *fla_gates, cp_context=object())),
            (ValueError, "allow_neg_eigval=True requires use_beta_sigmoid_in_kernel=True",
             lambda: ops.chunk_gated_delta_rule(*gdn_qkv, *fla_gates, allow_neg_eigval=True)),
            (ValueError, "g must be \\[B, T, HV\\] = \\(1, 4, 2\\), got \\(1, 4, 1\\)",
             lambda: ops.chunk_gated_delta_rule(*gdn_qkv, fla_gates[0][..., :1], fla_gates[1])),
            (ValueError, "use_gate_in_kernel=True needs A_log",
             lambda: ops.chunk_gated_delta_rule(*gdn_qkv, *fla_gates, use_gate_in_kernel=True)),
            (ValueError, "initial_state must be \\[N, HV, 128, 128\\] = \\(1, 2, 128, 128\\)",
             lambda: ops.chunk_gated_delta_rule(*gdn_qkv, *fla_gates, initial_state=torch.zeros(2, 2, 128, 128))),
            (ValueError, "q must be on a CUDA device, got cpu",
             lambda: ops.chunk_gated_delta_rule(*gdn_qkv, *fla_gates, initial_state=torch.zeros(1, 2, 128, 128))),
            (ValueError, "cu_seqlens \\(packed sequences\\) needs batch 1",
             lambda: ops.causal_conv1d(torch.zeros(2, 8, 4, dtype=torch.bfloat16),
                                       torch.zeros(8, 4, dtype=torch.bfloat16),
                                       cu_seqlens=torch.tensor([0, 2, 4], dtype=torch.int32))),
        ]
        for error, pattern, call in cases:
            with self.subTest(pattern=pattern):
                with self.assertRaisesRegex(error, pattern) as caught:
                    call()
                self.assertNotIn("\n", str(caught.exception))

    def test_forward_only_operators_refuse_gradients(self):
        # The device check comes first on the CPU; the gradient refusal is a GPU test (gpu_test.py).
        x = torch.zeros(1, 8, 4, dtype=torch.bfloat16, requires_grad=True)
        with self.assertRaisesRegex(ValueError, "CUDA device"):
            ops.causal_conv1d(x, torch.zeros(8, 4, dtype=torch.bfloat16))


if __name__ == "__main__":
    unittest.main()
