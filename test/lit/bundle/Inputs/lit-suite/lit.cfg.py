# A lit suite run by the bundle's own lit (bundle.test): the tools it calls,
# FileCheck and `not` included, come from the bundle named by $TC_BUNDLE.
import os

import lit.formats

config.name = "tc-bundle"
config.test_format = lit.formats.ShTest(True)
config.suffixes = [".test"]
config.test_source_root = os.path.dirname(__file__)
bundle = os.environ["TC_BUNDLE"]
config.environment["PATH"] = os.pathsep.join(
    [os.path.join(bundle, "bin"), os.path.join(bundle, "libexec", "tc"),
     "/usr/bin", "/bin"])
config.substitutions.append(("%bundle", bundle))
