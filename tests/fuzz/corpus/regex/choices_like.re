abc
def
"quoted"
\backé