#!/usr/bin/env python3
"""melforge CUDA emulator: rewrite a .cu file's kernel launches so it compiles
as host C++ (tests/cudaemu/prelude.hpp supplies the rest).

    name<<<cfg>>>(args)  ->  ::mf_emu::launch(::mf_emu::LaunchConfig(cfg), "name",
                                              [](auto... a) { name(a...); },
                                              MF_EMU_KERNEL_ADDRESS(name))(args)
  (a generic lambda, so template kernels deduce their arguments as with <<<>>>;
  the address, null when `name` is not one function, lets the runtime find the
  kernel's cudaFuncSetAttribute opt-ins)

and `extern __shared__ T v[];` -> `T* v = static_cast<T*>(::mf_emu::dynamic_smem());`.
A #line directive keeps diagnostics pointing at the original file.
usage: rewrite_cu.py IN.cu OUT.cpp
"""
import re
import sys

NAME = r"(?P<name>[A-Za-z_][\w:]*(?:\s*<(?:[^<>;]|<[^<>;]*>)*>)?)"
LAUNCH = re.compile(NAME + r"\s*<<<(?P<cfg>.*?)>>>\s*\(", re.S)
ALIGN = r"(?:(?:__align__|alignas)\s*\(\s*\d+\s*\)\s+)?"
EXTERN_SMEM = re.compile(r"extern\s+" + ALIGN + r"__shared__\s+" + ALIGN +
                         r"(?P<type>[\w:]+(?:\s+[\w:]+)*?)\s+" + ALIGN + r"(?P<var>\w+)\s*\[\s*\]\s*;")


def rewrite(src: str) -> str:
    def launch(m):
        name = m.group("name").strip()
        return ('::mf_emu::launch(::mf_emu::LaunchConfig(%s), "%s", [](auto... mf_emu_a) { %s(mf_emu_a...); }, '
                'MF_EMU_KERNEL_ADDRESS(%s))('
                % (m.group("cfg").strip(), re.sub(r"\s+", " ", name).replace('"', "'"), name, name))

    out = LAUNCH.sub(launch, src)
    out = EXTERN_SMEM.sub(lambda m: "%s* %s = static_cast<%s*>(::mf_emu::dynamic_smem());"
                          % (m.group("type"), m.group("var"), m.group("type")), out)
    if "<<<" in out:
        raise SystemExit("rewrite_cu.py: a launch was not recognized in %s" % sys.argv[1])
    return out


def main():
    src_path, out_path = sys.argv[1], sys.argv[2]
    with open(src_path, encoding="utf-8") as f:
        src = f.read()
    text = '#line 1 "%s"\n%s' % (src_path, rewrite(src))
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main()
