"""The read-only programs and, for each, the options known to be safe (from its manual, GNU coreutils 9 etc.).

Every option listed here only changes what a program prints. Left out on purpose (so they ask): options that
write (`sort -o`, `tree -o`), run programs (`sort --compress-program`, `file -z`), set the system (`date -s`),
read file names or patterns from a file (`--files0-from`, `-X`, `-f` for `file`/`date`), follow symbolic
links into other trees (`ls -L`, `du -L`, `tree -l`), or wait forever (`tail -f`). Long options must be
written in full (see options.py).
"""

from __future__ import annotations

from .options import Spec

_STD = "help version"

#: Programs that read only the files they are given (or stdin) and print; each with its safe options.
PROGRAMS: dict[str, Spec] = {
    "ls": Spec(
        "aAbBcCdDfFgGhHiklmnNopqQrRsStuUvxXZ1I:T:w:",
        "all almost-all author block-size= escape ignore-backups color? directory dired classify? file-type "
        "format= full-time group-directories-first no-group human-readable si dereference-command-line hide= "
        "hyperlink? indicator-style= inode ignore= kibibytes numeric-uid-gid literal hide-control-chars "
        "show-control-chars quote-name quoting-style= reverse recursive size sort= time= time-style= "
        "tabsize= width= context zero " + _STD,
    ),
    "cat": Spec("AbeEnstTuv", "show-all number-nonblank show-ends number squeeze-blank show-tabs "
                "show-nonprinting " + _STD),
    "head": Spec("c:n:qvz", "bytes= lines= quiet silent verbose zero-terminated " + _STD, numeric=True),
    "tail": Spec("c:n:qvz", "bytes= lines= quiet silent verbose zero-terminated " + _STD, numeric=True),
    "wc": Spec("cmlLw", "bytes chars lines max-line-length words " + _STD),
    "stat": Spec("Lfc:t", "dereference file-system format= printf= terse cached= " + _STD),
    "du": Spec(
        "0abB:cDd:HhklmPSst:x",
        "null all apparent-size block-size= bytes total dereference-args max-depth= human-readable inodes "
        "count-links no-dereference separate-dirs si summarize threshold= time? time-style= exclude= "
        "one-file-system " + _STD,
    ),
    "df": Spec("aB:hHiklPt:Tx:v", "all block-size= human-readable si inodes local output? portability total "
               "type= print-type exclude-type= " + _STD),
    "nl": Spec(
        "b:d:f:h:i:l:n:ps:v:w:",
        "body-numbering= section-delimiter= footer-numbering= header-numbering= line-increment= "
        "join-blank-lines= number-format= no-renumber number-separator= starting-line-number= number-width= "
        + _STD,
    ),
    "cut": Spec("b:c:d:f:nsz", "bytes= characters= delimiter= fields= complement only-delimited "
                "output-delimiter= zero-terminated " + _STD),
    "tr": Spec("cCdst", "complement delete squeeze-repeats truncate-set1 " + _STD),
    "basename": Spec("as:z", "multiple suffix= zero " + _STD),
    "dirname": Spec("z", "zero " + _STD),
    "realpath": Spec("emLPqsz", "canonicalize-existing canonicalize-missing logical physical quiet "
                     "relative-to= relative-base= strip no-symlinks zero " + _STD),
    "readlink": Spec("femnqsvz", "canonicalize canonicalize-existing canonicalize-missing no-newline quiet "
                     "silent verbose zero " + _STD),
    "cmp": Spec("bi:ln:s", "print-bytes ignore-initial= verbose bytes= quiet silent " + _STD),
    "comm": Spec("123z", "check-order nocheck-order output-delimiter= total zero-terminated " + _STD),
    "seq": Spec("f:s:w", "format= separator= equal-width " + _STD, numeric=True),
    "od": Spec("A:j:N:S:t:vw::abcdfilosx", "address-radix= endian= skip-bytes= read-bytes= strings? format= "
               "output-duplicates width? traditional " + _STD),
    "tac": Spec("brs:", "before regex separator= " + _STD),
    "paste": Spec("d:sz", "delimiters= serial zero-terminated " + _STD),
    "join": Spec("a:e:ij:o:t:v:1:2:z", "ignore-case check-order nocheck-order header zero-terminated "
                 + _STD),
    "fold": Spec("bsw:", "bytes spaces width= " + _STD),
    "fmt": Spec("cp:stuw:g:", "crown-margin prefix= split-only tagged-paragraph uniform-spacing width= goal= "
                + _STD),
    "numfmt": Spec("d:z", "debug delimiter= field= format= from= from-unit= grouping header? invalid= "
                   "padding= round= suffix= to= to-unit= zero-terminated " + _STD),
    "nproc": Spec("", "all ignore= " + _STD),
    # sort: not -o/--output (writes), --compress-program (runs it), -T (writes temporaries), --files0-from
    # (reads the files a list names), --random-source (reads a file).
    "sort": Spec(
        "bdfgiMhnRrVcCk:mst:uzS:",
        "ignore-leading-blanks dictionary-order ignore-case general-numeric-sort ignore-nonprinting "
        "month-sort human-numeric-sort numeric-sort random-sort reverse sort= version-sort check? debug key= "
        "merge stable buffer-size= field-separator= parallel= batch-size= unique zero-terminated " + _STD,
    ),
    "uniq": Spec("cdDf:is:uzw:", "count repeated all-repeated? skip-fields= group? ignore-case skip-chars= "
                 "unique zero-terminated check-chars= " + _STD),
    # date: not -s/--set (sets the clock), -f/--file (prints a file's lines in its errors).
    "date": Spec("d:I::Rr:u", "date= debug iso-8601? resolution rfc-email rfc-3339= reference= utc universal "
                 + _STD),
    # file: not -C (writes a .mgc), -m (loads magic), -f (a list of names), -z/-Z (decompressors),
    # -S (no sandbox), -p (changes access times).
    "file": Spec("bcikLhnNr0F:e:", "brief checking-printout mime mime-type mime-encoding apple extension "
                 "keep-going dereference no-dereference no-buffer no-pad raw print0 separator= exclude= "
                 "exclude-quiet= " + _STD),
    "id": Spec("aZgGnruz", "context group groups name real user zero " + _STD),
    "uname": Spec("asnrvmpio", "all kernel-name nodename kernel-release kernel-version machine processor "
                  "hardware-platform operating-system " + _STD),
    "whoami": Spec("", _STD),
    "printenv": Spec("0", "null " + _STD),
    "pwd": Spec("LP"),
    "column": Spec("ts:o:c:xN:dR:LJ", "table separator= output-separator= output-width= fillrows "
                   "table-columns= table-noheadings table-right= keep-empty-lines json " + _STD),
    # hexdump: not -f (reads a format file).
    "hexdump": Spec("bcCdoxvn:s:e:", "one-byte-octal one-byte-char canonical two-bytes-decimal "
                    "two-bytes-octal two-bytes-hex no-squeezing length= skip= format= " + _STD),
    "strings": Spec("adfn:t:wT:e:s:o", "all data print-file-name bytes= radix= include-all-whitespace "
                    "target= encoding= output-separator= " + _STD, numeric=True),
    "rev": Spec("", _STD),
    "tree": Spec("adfxiqNQpugshDFvtcUrnCJXL:P:I:",
                 "noreport dirsfirst prune filelimit= charset= du si " + _STD),
    "locale": Spec("amckv", "all-locales charmaps category-name keyword-name verbose " + _STD),
    "which": Spec("as"),
    "type": Spec("afptP"),
    "sleep": Spec("", _STD),
    "jq": Spec("rjcnseSCMaR", "raw-output join-output compact-output null-input slurp exit-status sort-keys "
               "color-output monochrome-output ascii-output raw-input tab indent= seq stream " + _STD),
}
for _name in ("md5sum", "sha1sum", "sha224sum", "sha256sum", "sha384sum", "sha512sum", "b2sum"):
    # Not -c/--check: it reads every file the list names.
    PROGRAMS[_name] = Spec("btz", "binary tag text zero " + _STD)

#: grep and its wrappers; -r/-R and `-d recurse` make them read whole trees (checked for secrets).
#: Not -f/--file of a secret (checked like any path), -D/--devices (may block), --exclude-from.
GREP = Spec(
    "EFGPe:f:iywxzsvVm:bnHhoqaId:rRLlcTZB:A:C:U",
    "extended-regexp fixed-strings basic-regexp perl-regexp regexp= file= ignore-case no-ignore-case "
    "word-regexp line-regexp null-data no-messages invert-match max-count= byte-offset line-number "
    "line-buffered with-filename no-filename label= only-matching quiet silent binary-files= text "
    "directories= recursive dereference-recursive include= exclude= exclude-dir= files-without-match "
    "files-with-matches count initial-tab null before-context= after-context= context= group-separator= "
    "no-group-separator color? colour? binary " + _STD,
    numeric=True,
)
for _name in ("grep", "egrep", "fgrep"):
    PROGRAMS[_name] = GREP

#: ripgrep, always recursive. Not --pre/--pre-glob (run a program per file), -z/--search-zip (decompressors),
#: --hostname-bin (runs it), --ignore-file (reads a file).
PROGRAMS["rg"] = Spec(
    "e:f:isSvwxFPnNHIlcC:A:B:m:t:T:g:uoUaLr:0M:qj:",
    "regexp= file= ignore-case case-sensitive smart-case invert-match word-regexp line-regexp fixed-strings "
    "pcre2 line-number no-line-number with-filename no-filename files-with-matches files-without-match count "
    "count-matches context= after-context= before-context= max-count= type= type-not= glob= iglob= hidden "
    "no-ignore no-ignore-vcs no-ignore-dot no-ignore-parent no-ignore-global no-ignore-exclude unrestricted "
    "only-matching multiline multiline-dotall text follow files type-list json vimgrep heading no-heading "
    "color= column no-column trim sort= sortr= max-depth= max-columns= max-columns-preview max-filesize= "
    "replace= passthru quiet null threads= stats byte-offset crlf no-messages one-file-system " + _STD,
)

#: diff; -r makes it read whole trees. Not -l/--paginate (runs pr), -X/--exclude-from (reads a file).
PROGRAMS["diff"] = Spec(
    "qsceC:uU:nyW:pF:tTrNx:S:iEZbwBI:adD:v",
    "normal brief report-identical-files context? unified? ed rcs side-by-side width= left-column "
    "suppress-common-lines show-c-function show-function-line= label= expand-tabs initial-tab tabsize= "
    "suppress-blank-empty recursive no-dereference new-file unidirectional-new-file ignore-file-name-case "
    "no-ignore-file-name-case exclude= starting-file= from-file= to-file= ignore-case ignore-tab-expansion "
    "ignore-trailing-space ignore-space-change ignore-all-space ignore-blank-lines ignore-matching-lines= "
    "text strip-trailing-cr ifdef= minimal horizon-lines= speed-large-files color? palette= " + _STD,
)

#: Programs whose operands are strings, not files (their option values are still checked as paths).
STRING_OPERANDS = frozenset({"echo", "printf", "tr", "basename", "dirname", "seq", "expr", "date", "sleep",
                             "true", "false", "test", "[", "numfmt", "which", "type", "locale", "id",
                             "printenv", "command"})

#: `PROGRAM --version` is read-only for these. Not cargo, rustc, go or npm: a file in the repo
#: (rust-toolchain.toml, go.mod's toolchain line, package.json's packageManager) can pick the binary.
VERSION_QUERY = frozenset({"python", "python3", "node", "gcc", "make", "pip", "pip3", "java", "ruby"})
#: Version-manager pins: with one in the workspace, `python --version` may run a program it names.
VERSION_PINS = (".python-version", ".ruby-version", ".node-version", ".nvmrc", ".tool-versions",
                ".java-version", "mise.toml", ".mise.toml", ".rtx.toml")
